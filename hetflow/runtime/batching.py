"""A batch collector: calls queue their items, a background task forms batches up to a maximum
size or a maximum wait, and runs the batch function off the event loop (Chimera 3.8)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import time
from typing import Any, Awaitable, Callable, Generic, Sequence, TypeVar

from prometheus_client import Histogram

from hetflow.core.errors import Unavailable
from hetflow.runtime.logs import get_logger

BATCH_SIZE = Histogram("hetflow_batch_size", "Items per batch run", ["collector"],
                       buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256))

log = get_logger(__name__)
ItemT = TypeVar("ItemT")
ResultT = TypeVar("ResultT")
Replacement = Callable[[], Awaitable[concurrent.futures.Executor]]
"""Makes a fresh executor, ready to take a batch (its workers started and their model loaded)."""


class BatchCollector(Generic[ItemT, ResultT]):
    """Coalesce concurrent ``submit`` calls into batches of at most ``max_batch_size`` items.

    ``batch_fn`` maps a list of items to a list of results of the same length; it runs in
    ``executor`` so that inference never blocks the event loop, at most ``concurrency`` batches at a
    time (one per worker process: a batch is formed only once a worker is free for it, so with one
    worker the next batch takes every call that arrived while the last one ran).
    """

    def __init__(self, batch_fn: Callable[[list[ItemT]], list[ResultT]], max_batch_size: int,
                 max_wait_s: float, executor: concurrent.futures.Executor, name: str = "batch",
                 replacement: Replacement | None = None, concurrency: int = 1) -> None:
        """``replacement``: makes a fresh executor for one that broke (a worker process that died: every
        later batch would fail on it); None: none is made."""
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be >= 1")
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self._batch_fn, self._max_batch_size, self._max_wait_s = batch_fn, max_batch_size, max_wait_s
        self._executor, self._replacement = executor, replacement
        self._batch_size = BATCH_SIZE.labels(name)
        self._pending: asyncio.Queue[tuple[ItemT, asyncio.Future[ResultT]]] = asyncio.Queue()
        self._free_runs = asyncio.Semaphore(concurrency)
        self._runs: set[asyncio.Task[None]] = set()
        self._replacing: asyncio.Task[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self.largest_batch = 0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._collect_forever())

    async def close(self) -> None:
        """Stop: every caller still waiting, in a batch under way or queued, fails UNAVAILABLE."""
        tasks = [t for t in (self._task, self._replacing, *self._runs) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._task = self._replacing = None
        queued = []  # a collector cancelled before its first step failed none of them
        while not self._pending.empty():
            queued.append(self._pending.get_nowait())
        _fail(queued, _stopping())

    @property
    def executor(self) -> concurrent.futures.Executor:
        return self._executor

    def replace_executor(self, executor: concurrent.futures.Executor,
                         replacement: Replacement | None) -> concurrent.futures.Executor:
        """Later batches run on ``executor``, and ``replacement`` makes the one for it should it break; the
        batches under way finish on the old one, returned."""
        old, self._executor, self._replacement = self._executor, executor, replacement
        replacing, self._replacing = self._replacing, None
        if replacing is not None:  # a fresh one for the broken executor is not needed now
            replacing.cancel()
        return old

    async def submit(self, items: Sequence[ItemT]) -> list[ResultT]:
        if not items:
            return []
        self.start()
        loop = asyncio.get_running_loop()
        futures = []
        for item in items:
            future: asyncio.Future[ResultT] = loop.create_future()
            self._pending.put_nowait((item, future))
            futures.append(future)
        return list(await asyncio.gather(*futures))

    async def _collect_forever(self) -> None:
        batch: list[tuple[ItemT, asyncio.Future[ResultT]]] = []
        try:
            await self._collect(batch)
        except asyncio.CancelledError:  # closed: the batch being formed hears it (``close``: those queued)
            _fail(batch, _stopping())
            raise

    async def _collect(self, batch: list[tuple[ItemT, asyncio.Future[ResultT]]]) -> None:
        """Gather batches into ``batch`` (the one being formed, for ``_collect_forever`` to fail) and start
        each on a free run."""
        while True:
            await self._free_runs.acquire()
            try:
                await self._form(batch)
            except BaseException:  # closed while forming: the run's slot is free again
                self._free_runs.release()
                raise
            formed = list(batch)
            run = asyncio.get_running_loop().create_task(self._run(formed))
            run.add_done_callback(functools.partial(self._run_done, formed))
            batch.clear()
            self._runs.add(run)

    async def _form(self, batch: list[tuple[ItemT, asyncio.Future[ResultT]]]) -> None:
        """Up to ``max_batch_size`` items: the first to arrive, then what arrives within ``max_wait_s``."""
        batch[:] = [await self._pending.get()]
        deadline = time.monotonic() + self._max_wait_s
        while len(batch) < self._max_batch_size:
            timeout = deadline - time.monotonic()
            if timeout <= 0 and self._pending.empty():
                break
            if self._pending.qsize():
                batch.append(self._pending.get_nowait())
                continue
            try:
                async with asyncio.timeout(max(timeout, 0)):  # not wait_for: it can swallow a cancel
                    batch.append(await self._pending.get())
            except TimeoutError:
                break

    def _run_done(self, batch: list[tuple[ItemT, asyncio.Future[ResultT]]], run: asyncio.Task[None]) -> None:
        self._runs.discard(run)
        self._free_runs.release()
        if run.cancelled():  # a run cancelled before its first step ran none of its own handlers
            _fail(batch, _stopping())

    async def _run(self, batch: list[tuple[ItemT, asyncio.Future[ResultT]]]) -> None:
        live = [(item, fut) for item, fut in batch if not fut.done()]
        if not live:
            return
        self.largest_batch = max(self.largest_batch, len(live))
        self._batch_size.observe(len(live))
        try:
            while (replacing := self._replacing) is not None and not replacing.done():  # the fresh executor
                await asyncio.wait([replacing])
            executor = self._executor
            results = await asyncio.get_running_loop().run_in_executor(
                executor, self._batch_fn, [item for item, _ in live])
            if len(results) != len(live):
                raise RuntimeError(f"batch function returned {len(results)} results for {len(live)} items")
        except asyncio.CancelledError:
            _fail(live, _stopping())
            raise
        except concurrent.futures.BrokenExecutor as broken:  # a worker died: UNAVAILABLE, and new workers
            _fail(live, Unavailable(f"the model's worker stopped ({type(broken).__name__}): its calls are not "
                                    "answered"))
            self._replace_broken(executor)
            return
        except Exception as exc:  # noqa: BLE001 - the callers get the failure
            _fail(live, exc)
            return
        for (_, fut), result in zip(live, results):
            if not fut.done():
                fut.set_result(result)

    def _replace_broken(self, broken: concurrent.futures.Executor) -> None:
        """Start a fresh executor for later batches (once, whichever batch saw it break first); batches
        formed meanwhile wait for it."""
        if self._replacement is None or self._executor is not broken or self._replacing is not None:
            return
        self._replacing = asyncio.get_running_loop().create_task(self._replace(broken, self._replacement))

    async def _replace(self, broken: concurrent.futures.Executor, replacement: Replacement) -> None:
        """One that cannot start leaves the broken one: the next batch fails UNAVAILABLE and tries again."""
        starting = asyncio.ensure_future(replacement())
        try:
            fresh = await asyncio.shield(starting)
        except asyncio.CancelledError:  # a swap or close let it go: the pool, once started, is shut down
            starting.add_done_callback(_shut_down_started)
            raise
        except Exception as exc:  # noqa: BLE001 - the next batch fails on the broken one and tries again
            log.error("workers_not_replaced", error=f"{type(exc).__name__}: {exc}")
            return
        finally:
            if self._replacing is asyncio.current_task():  # a swap may have let it go already
                self._replacing = None
        if self._executor is broken:
            self._executor = fresh
        else:  # a reload swapped the executor meanwhile
            fresh.shutdown(wait=False, cancel_futures=True)
        broken.shutdown(wait=False, cancel_futures=True)


def _shut_down_started(starting: asyncio.Future[concurrent.futures.Executor]) -> None:
    if not starting.cancelled() and starting.exception() is None:
        starting.result().shutdown(wait=False, cancel_futures=True)


def _stopping() -> Unavailable:
    return Unavailable("the service is stopping: its batches are not run")


def _fail(asked: list[tuple[Any, asyncio.Future[Any]]], failure: BaseException) -> None:
    """Every caller of ``asked`` still waiting gets ``failure``."""
    for _, future in asked:
        if not future.done():
            future.set_exception(failure)
