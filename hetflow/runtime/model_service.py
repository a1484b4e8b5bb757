"""What router_svc and predictor_svc share: a warm worker pool behind a batch collector, and an
artifact reloader that swaps the pool when a new artifact lands."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from hetflow.runtime.batching import BatchCollector
from hetflow.runtime.reloader import ArtifactReloader
from hetflow.runtime.workers import process_pool, warm_pool


@dataclass
class ModelWorkers:
    collector: BatchCollector[Any, Any]
    reloader: ArtifactReloader | None

    async def close(self) -> None:
        if self.reloader:
            await self.reloader.close()
        await self.collector.close()
        self.collector.executor.shutdown(wait=False, cancel_futures=True)


async def start_model_workers(name: str, spec: dict[str, Any], workers: int, max_batch_size: int, max_wait_s: float,
                              init: Callable[..., None], batch_fn: Callable[[list[Any]], list[Any]],
                              artifact: str, reload_poll_s: float, build: Callable[[dict[str, Any]], Any],
                              on_swap: Callable[[Any], None]) -> ModelWorkers:
    """Pool warmed (models loaded) before the first call; reloads when ``artifact``/meta.json changes."""
    pool = process_pool(workers, init, spec)
    await warm_pool(pool, workers)
    collector: BatchCollector[Any, Any] = BatchCollector(batch_fn, max_batch_size, max_wait_s, pool, name,
                                                         replacement=lambda: process_pool(workers, init, spec))
    collector.start()
    reloader = None
    if artifact:
        reloader = ArtifactReloader(Path(artifact) / "meta.json", reload_poll_s, collector,
                                    validate=lambda: build(spec), make_pool=lambda: process_pool(workers, init, spec),
                                    on_swap=on_swap, workers=workers)
        reloader.start()
    return ModelWorkers(collector, reloader)
