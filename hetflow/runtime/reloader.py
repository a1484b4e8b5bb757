"""Swap a service's model for a new artifact while serving, without dropping a call.

A watcher polls the modification time of the artifact's meta.json (written last); on a change it copies
the artifact apart (``ArtifactCopies``), builds and validates the copy's model in this process first,
then starts a new worker pool on the copy and points the batch collector at that pool. Batches already
running finish on the old pool, which is then shut down. A bad artifact is logged and the old model
keeps serving, as does a fresh pool made after a worker dies: it loads the copy that was served.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from pathlib import Path
from typing import Any, Awaitable, Callable

from hetflow.runtime.artifact_copies import ArtifactCopies
from hetflow.runtime.batching import BatchCollector, Replacement
from hetflow.runtime.logs import get_logger

log = get_logger(__name__)

Spec = dict[str, Any]


class ArtifactReloader:
    def __init__(self, artifact: Path, poll_s: float, collector: BatchCollector[Any, Any], copies: ArtifactCopies,
                 spec: Spec, build: Callable[[Spec], Any],
                 start_pool: Callable[[Spec], Awaitable[concurrent.futures.Executor]],
                 replacement: Callable[[Spec], Replacement], on_swap: Callable[[Any], None],
                 seen_mtime: float) -> None:
        """``spec``: the served one, its ``artifact`` replaced by each new copy's path; ``build`` validates a
        spec's model, ``start_pool`` starts warm workers on it, ``replacement`` makes those the collector
        starts should they die; ``seen_mtime``: the ``meta.json`` time of the copy served (read before
        it was taken, so that an artifact written meanwhile is reloaded)."""
        self._artifact, self._watched, self._poll_s = artifact, artifact / "meta.json", poll_s
        self._collector, self._copies, self._spec = collector, copies, spec
        self._build, self._start_pool, self._replacement, self._on_swap = build, start_pool, replacement, on_swap
        self._mtime = seen_mtime
        self._task: asyncio.Task[None] | None = None
        self.reloads = 0

    def start(self) -> None:
        if self._poll_s > 0:
            self._task = asyncio.get_running_loop().create_task(self._run_forever())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    @staticmethod
    def mtime_of(artifact: Path) -> float:
        """The modification time of ``artifact``'s meta.json; 0 when it has none."""
        try:
            return (artifact / "meta.json").stat().st_mtime
        except FileNotFoundError:
            return 0.0

    async def _run_forever(self) -> None:
        while True:
            await asyncio.sleep(self._poll_s)
            mtime = self.mtime_of(self._artifact)
            if mtime and mtime != self._mtime:
                self._mtime = mtime
                await self.reload()

    async def reload(self) -> bool:
        loop = asyncio.get_running_loop()
        try:
            copy = await loop.run_in_executor(None, self._copies.take, self._artifact)
        except Exception as exc:  # noqa: BLE001 - keep serving the old model
            log.error("artifact_rejected", path=str(self._watched), error=f"it could not be copied: {exc}")
            return False
        spec = {**self._spec, "artifact": str(copy)}
        try:
            model = await loop.run_in_executor(None, self._build, spec)
        except Exception as exc:  # noqa: BLE001 - keep serving the old model
            self._copies.discard(copy)
            log.error("artifact_rejected", path=str(self._watched), error=str(exc))
            return False
        try:
            pool = await self._start_pool(spec)  # the new model is loaded before it takes a call
        except Exception as exc:  # noqa: BLE001 - a worker that cannot start: keep serving the old model
            self._copies.discard(copy)
            log.error("artifact_rejected", path=str(self._watched), error=f"the workers did not start: {exc}")
            return False
        old = self._collector.replace_executor(pool, self._replacement(spec))
        self._copies.serve(copy)
        self._on_swap(model)
        old.shutdown(wait=False)  # running batches finish; nothing new goes there
        self.reloads += 1
        log.info("artifact_reloaded", path=str(self._watched), reloads=self.reloads)
        return True
