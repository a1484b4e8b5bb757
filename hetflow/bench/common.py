"""Where benchmark results go and which machine made them."""

from __future__ import annotations

import argparse
import json
import platform
import signal
import sys
from pathlib import Path
from typing import Any, Sequence

OUT_DIR = Path("bench_out")


def machine() -> str:
    import os

    return (f"{platform.machine()}, {os.cpu_count()} cores, "
            f"{platform.python_implementation()} {platform.python_version()}")


def exit_on_sigterm() -> None:
    """SIGTERM ends the process as Ctrl-C would, through its ``finally`` blocks: a live harness stops the
    stacks it started (they run detached, so a plain SIGTERM left them serving)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))


def write(name: str, result: dict[str, Any]) -> Path:
    OUT_DIR.mkdir(exist_ok=True)
    path = OUT_DIR / f"{name}.json"
    path.write_text(json.dumps({"machine": machine(), **result}, indent=2, allow_nan=False))
    return path


def chosen(parser: argparse.ArgumentParser, value: str, known: Sequence[str], kind: str) -> list[str]:
    """A comma-separated choice among ``known``; an unknown one is the parser's one-line error naming the
    known ones (``kind``: what they are, plural with "(s)"), before anything starts."""
    names = value.split(",")
    if unknown := [name for name in names if name not in known]:
        parser.error(f"unknown {kind}(s) {', '.join(unknown)}; known: {', '.join(known)}")
    return names
