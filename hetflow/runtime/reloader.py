"""Swap a service's model for a new artifact while serving, without dropping a call.

A watcher polls a file's modification time (an artifact's meta.json, written last); on a change it
builds and validates the new model in this process first, then starts a new worker pool with it and
points the batch collector at that pool. Batches already running finish on the old pool, which is
then shut down. A bad artifact is logged and the old model keeps serving.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from pathlib import Path
from typing import Any, Callable

from hetflow.runtime.batching import BatchCollector
from hetflow.runtime.logs import get_logger
from hetflow.runtime.workers import warm_pool

log = get_logger(__name__)


class ArtifactReloader:
    def __init__(self, watched: Path, poll_s: float, collector: BatchCollector[Any, Any],
                 validate: Callable[[], Any], make_pool: Callable[[], concurrent.futures.Executor],
                 on_swap: Callable[[Any], None], workers: int = 1) -> None:
        self._watched, self._poll_s, self._collector = watched, poll_s, collector
        self._validate, self._make_pool, self._on_swap = validate, make_pool, on_swap
        self._workers = workers
        self._mtime = self._current_mtime()
        self._task: asyncio.Task[None] | None = None
        self.reloads = 0

    def start(self) -> None:
        if self._poll_s > 0:
            self._task = asyncio.get_running_loop().create_task(self._run_forever())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def _current_mtime(self) -> float:
        try:
            return self._watched.stat().st_mtime
        except FileNotFoundError:
            return 0.0

    async def _run_forever(self) -> None:
        while True:
            await asyncio.sleep(self._poll_s)
            mtime = self._current_mtime()
            if mtime and mtime != self._mtime:
                self._mtime = mtime
                await self.reload()

    async def reload(self) -> bool:
        loop = asyncio.get_running_loop()
        try:
            model = await loop.run_in_executor(None, self._validate)
        except Exception as exc:  # noqa: BLE001 - keep serving the old model
            log.error("artifact_rejected", path=str(self._watched), error=str(exc))
            return False
        pool: concurrent.futures.Executor | None = None
        try:
            pool = await loop.run_in_executor(None, self._make_pool)  # with 0 workers it builds the model here
            await warm_pool(pool, self._workers)  # the new model is loaded before it takes a call
        except Exception as exc:  # noqa: BLE001 - a worker that cannot start: keep serving the old model
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
            log.error("artifact_rejected", path=str(self._watched), error=f"the workers did not start: {exc}")
            return False
        old = self._collector.replace_executor(pool)
        self._on_swap(model)
        old.shutdown(wait=False)  # running batches finish; nothing new goes there
        self.reloads += 1
        log.info("artifact_reloaded", path=str(self._watched), reloads=self.reloads)
        return True
