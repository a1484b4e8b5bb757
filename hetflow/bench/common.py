"""Where benchmark results go and which machine made them."""

from __future__ import annotations

import argparse
import json
import platform
import signal
import sys
from pathlib import Path
from typing import Any, Iterator, Sequence

OUT_DIR = Path("bench_out")


def append_json_line(path: Path, line: Any) -> None:
    """Append ``line`` as one JSON line; a line an interruption cut off stays a line of its own."""
    path.parent.mkdir(parents=True, exist_ok=True)
    cut_off = False
    if path.exists() and path.stat().st_size > 0:
        with path.open("rb") as tail:             # the last byte only: a journal grows to megabytes
            tail.seek(-1, 2)
            cut_off = tail.read(1) != b"\n"
    with path.open("a") as f:
        f.write(("\n" if cut_off else "") + json.dumps(line, default=list) + "\n")


def json_lines(path: Path) -> Iterator[Any]:
    """The lines ``append_json_line`` wrote, a line cut off by an interruption skipped; none without a file."""
    if not path.exists():
        return
    for text in path.read_text().splitlines():
        try:
            yield json.loads(text)
        except json.JSONDecodeError:
            continue


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
