"""Process pools for inference off the event loop (Chimera 3.8: process-based isolation).

A worker builds its model once, in its initializer, from a picklable spec; batch functions are
module-level so they pickle by name. ``warm_pool`` runs that initializer in every worker before the
pool takes traffic, so a service is SERVING only once its model is loaded.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
import os
from typing import Any, Callable


def process_pool(workers: int, initializer: Callable[..., None],
                 *initargs: Any) -> concurrent.futures.ProcessPoolExecutor:
    # spawn, not fork: a forked child would inherit gRPC's threads and locks.
    return concurrent.futures.ProcessPoolExecutor(
        max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
        initializer=initializer, initargs=initargs)


def _worker_pid() -> int:
    return os.getpid()


async def warm_pool(pool: concurrent.futures.Executor, workers: int) -> None:
    """Start every worker (and so load its model) now rather than on the first call."""
    loop = asyncio.get_running_loop()
    await asyncio.gather(*(loop.run_in_executor(pool, _worker_pid) for _ in range(workers)))
