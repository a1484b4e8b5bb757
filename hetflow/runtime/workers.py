"""Process pools for inference off the event loop (Chimera 3.8: process-based isolation).

A worker builds its model once, in its initializer, from a picklable spec; batch functions are
module-level so they pickle by name.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
from typing import Any, Callable


def process_pool(workers: int, initializer: Callable[..., None], *initargs: Any) -> concurrent.futures.ProcessPoolExecutor:
    # spawn, not fork: a forked child would inherit gRPC's threads and locks.
    return concurrent.futures.ProcessPoolExecutor(
        max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
        initializer=initializer, initargs=initargs)
