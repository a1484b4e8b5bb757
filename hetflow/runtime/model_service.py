"""What router_svc and predictor_svc share: a warm worker pool behind a batch collector, and an
artifact reloader that swaps the pool when a new artifact lands. The workers load a private copy of the
artifact (``ArtifactCopies``), so a pool started later loads the model that was validated."""

from __future__ import annotations

import asyncio
import concurrent.futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from hetflow.runtime.artifact_copies import ArtifactCopies
from hetflow.runtime.batching import BatchCollector, Replacement
from hetflow.runtime.reloader import ArtifactReloader
from hetflow.runtime.workers import warmed_pool


@dataclass
class ModelWorkers:
    collector: BatchCollector[Any, Any]
    reloader: ArtifactReloader | None
    copies: ArtifactCopies | None

    async def close(self) -> None:
        if self.reloader:
            await self.reloader.close()
        await self.collector.close()
        self.collector.executor.shutdown(wait=False, cancel_futures=True)
        if self.copies:
            self.copies.close()


async def start_model_workers(name: str, spec: dict[str, Any], workers: int, max_batch_size: int, max_wait_s: float,
                              init: Callable[..., None], batch_fn: Callable[[list[Any]], list[Any]],
                              reload_poll_s: float, build: Callable[[dict[str, Any]], Any],
                              on_swap: Callable[[Any], None]) -> tuple[ModelWorkers, Any]:
    """Pool warmed (models loaded) before the first call, one batch at a time in each worker, and the
    model ``build`` made of what the workers load, for its names (not to be kept: the workers hold it).
    With an artifact in ``spec`` the workers load a copy of it, and a reload follows its ``meta.json``."""

    async def start_pool(spec: dict[str, Any]) -> concurrent.futures.Executor:
        return await warmed_pool(workers, init, spec)

    def replacement(spec: dict[str, Any]) -> Replacement:
        return lambda: start_pool(spec)

    loop = asyncio.get_running_loop()
    artifact = spec.get("artifact")
    copies = ArtifactCopies(name) if artifact else None
    seen_mtime = ArtifactReloader.mtime_of(Path(artifact)) if artifact else 0.0  # before the copy: none missed
    try:
        if copies and artifact:
            copy = await loop.run_in_executor(None, copies.take, Path(artifact))
            copies.serve(copy)
            spec = {**spec, "artifact": str(copy)}
        model = await loop.run_in_executor(None, build, spec)
        pool = await start_pool(spec)
    except BaseException:
        if copies:
            copies.close()
        raise
    collector: BatchCollector[Any, Any] = BatchCollector(batch_fn, max_batch_size, max_wait_s, pool, name,
                                                         replacement=replacement(spec), concurrency=max(1, workers))
    collector.start()
    reloader = None
    if copies and artifact:
        reloader = ArtifactReloader(Path(artifact), reload_poll_s, collector, copies, spec, build, start_pool,
                                    replacement, on_swap, seen_mtime)
        reloader.start()
    return ModelWorkers(collector, reloader, copies), model
