"""Where a running service's CPU goes: py-spy (a sampling profiler, attached by pid) records each named
process for the length of a measurement, one flame graph (SVG) per process.

    with flame_graphs({"balancer": 1234, "monitor": 1235}, Path("profiles"), label="50"):
        ...                                  # the load the graphs are of

py-spy samples from outside the process (``--nonblocking``: the process is never paused), so the
figure measured beside it moves by the profiler's own CPU only, which it spends in its own process.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Iterator, Mapping

SAMPLES_PER_S = 97
"""py-spy's sampling rate: off the 100 Hz of timers, so samples do not beat with them."""


def py_spy() -> str:
    """The py-spy executable beside this interpreter (the ``bench`` extra installs it), else on PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if not found:
        raise RuntimeError("py-spy is not installed: pip install -e '.[bench]'")
    return found


@contextlib.contextmanager
def flame_graphs(pids: Mapping[str, int], out_dir: Path, label: str) -> Iterator[list[Path]]:
    """Record every process of ``pids`` while the block runs; the graphs are ``out_dir/<label>-<name>.svg``,
    written once the block ends (each recorder is then interrupted, as py-spy's Ctrl-C, and writes its
    graph)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    graphs = [out_dir / f"{label}-{name}.svg" for name in pids]
    recorders = [subprocess.Popen([py_spy(), "record", "--pid", str(pid), "--rate", str(SAMPLES_PER_S),
                                   "--format", "flamegraph", "--nonblocking", "--output", str(graph)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                 for pid, graph in zip(pids.values(), graphs)]
    try:
        yield graphs
    finally:
        for recorder in recorders:
            recorder.send_signal(signal.SIGINT)
        for recorder in recorders:
            _, err = recorder.communicate(timeout=60)
            if recorder.returncode not in (0, -signal.SIGINT):
                print(f"py-spy: {err.decode(errors='replace').strip()[-300:]}", file=sys.stderr)
