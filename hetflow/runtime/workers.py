"""Process pools for inference off the event loop (Chimera 3.8: process-based isolation).

A worker builds its model once, in its initializer, from a picklable spec; batch functions are
module-level so they pickle by name. ``warm_pool`` runs that initializer in every worker before the
pool takes traffic, so a service is SERVING only once its model is loaded. A worker exits on its own
when its service dies, however it died (a SIGKILL runs no clean-up in the parent).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
import os
import threading
import time
from typing import Any, Callable

PARENT_CHECK_S = 1.0
"""How often a worker checks that its service is still alive."""


class InProcess(concurrent.futures.Executor):
    """Runs each batch in the service's own process, on its event loop, at once: for a model whose
    batch costs less than handing it to a worker process and back (fixed priors, the input-length
    predictor), where the hand-off was most of the service's CPU per call (docs/benchmarks.md)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - the caller gets the failure, as from a worker
            future.set_exception(exc)
        return future


def worker_count(configured: int | None, in_process_by_default: bool, section: str) -> int:
    """The worker processes a model service runs: ``configured`` (0 runs the model in the service's own
    process), or when it is None, 0 for a model cheaper than the hand-off to a worker and back and 1 for
    one whose batches must not hold up the event loop."""
    if configured is None:
        return 0 if in_process_by_default else 1
    if configured < 0:
        raise ValueError(f"{section}.workers must be >= 0, got {configured}")
    return configured


def process_pool(workers: int, initializer: Callable[..., None], *initargs: Any) -> concurrent.futures.Executor:
    """``workers`` processes, each built by ``initializer(*initargs)``; 0: the model built here and run in
    this process (``InProcess``)."""
    if workers == 0:
        initializer(*initargs)
        return InProcess()
    # spawn, not fork: a forked child would inherit gRPC's threads and locks.
    return concurrent.futures.ProcessPoolExecutor(
        max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
        initializer=_init_worker, initargs=(os.getpid(), initializer, *initargs))


def _init_worker(parent_pid: int, initializer: Callable[..., None], *initargs: Any) -> None:
    threading.Thread(target=_exit_with_parent, args=(parent_pid,), name="parent-watch", daemon=True).start()
    initializer(*initargs)


def _exit_with_parent(parent_pid: int) -> None:
    """A worker whose service is gone is re-parented (its parent pid changes): it exits at once."""
    while os.getppid() == parent_pid:
        time.sleep(PARENT_CHECK_S)
    os._exit(0)


def _worker_pid() -> int:
    return os.getpid()


async def warm_pool(pool: concurrent.futures.Executor, workers: int) -> None:
    """Start every worker (and so load its model) now rather than on the first call."""
    loop = asyncio.get_running_loop()
    await asyncio.gather(*(loop.run_in_executor(pool, _worker_pid) for _ in range(workers)))


async def warmed_pool(workers: int, initializer: Callable[..., None], *initargs: Any) -> concurrent.futures.Executor:
    """``process_pool`` made off the event loop (with 0 workers it builds the model in this process) and
    warmed; a pool whose workers cannot start is shut down and its failure raised."""
    pool = await asyncio.get_running_loop().run_in_executor(None, process_pool, workers, initializer, *initargs)
    try:
        await warm_pool(pool, workers)
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    return pool
