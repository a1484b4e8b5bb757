"""Inference workers die with their service, even one killed without a chance to clean up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

SERVICE = """
import asyncio, time
from hetflow.runtime.workers import process_pool, warm_pool

async def main():
    pool = process_pool(2, time.sleep, 0)
    await warm_pool(pool, 2)
    print(*pool._processes, flush=True)
    await asyncio.sleep(300)

asyncio.run(main())
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie has exited already
        return stat.read().split(")")[-1].split()[0] != "Z"


def test_workers_exit_when_their_service_is_killed():
    service = subprocess.Popen([sys.executable, "-c", SERVICE], stdout=subprocess.PIPE, text=True)
    assert service.stdout is not None
    workers = [int(pid) for pid in service.stdout.readline().split()]
    assert len(workers) == 2 and all(_alive(pid) for pid in workers)
    service.send_signal(signal.SIGKILL)
    service.wait()
    give_up_s = time.monotonic() + 30  # a bound on waiting, not a timing under test
    while any(_alive(pid) for pid in workers) and time.monotonic() < give_up_s:
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in workers)
