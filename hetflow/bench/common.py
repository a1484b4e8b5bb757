"""Where benchmark results go and which machine made them."""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any

OUT_DIR = Path("bench_out")


def machine() -> str:
    import os

    return (f"{platform.machine()}, {os.cpu_count()} cores, "
            f"{platform.python_implementation()} {platform.python_version()}")


def write(name: str, result: dict[str, Any]) -> Path:
    OUT_DIR.mkdir(exist_ok=True)
    path = OUT_DIR / f"{name}.json"
    path.write_text(json.dumps({"machine": machine(), **result}, indent=2, allow_nan=False))
    return path
