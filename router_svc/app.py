"""Assemble the router service."""

from __future__ import annotations

from pathlib import Path
from typing import Awaitable, Callable, Sequence

from hetflow.runtime.batching import BatchCollector
from hetflow.runtime.reloader import ArtifactReloader
from hetflow.runtime.server import Registration
from hetflow.runtime.workers import process_pool, warm_pool
from hetflow.v1 import router_pb2, router_pb2_grpc
from router_svc import worker
from router_svc.config import RouterConfig
from router_svc.scorers import build_scorer
from router_svc.servicer import RouterServicer

SERVICE_NAME = router_pb2.DESCRIPTOR.services_by_name["Router"].full_name


def build(cfg: RouterConfig) -> Callable[[], Awaitable[tuple[Sequence[Registration], Callable[[], Awaitable[None]]]]]:
    spec = cfg.scorer_spec()
    scorer = build_scorer(spec)  # fail at start, in this process, on a bad spec or artifact

    async def setup() -> tuple[Sequence[Registration], Callable[[], Awaitable[None]]]:
        pool = process_pool(cfg.workers, worker.init, spec)
        await warm_pool(pool, cfg.workers)
        collector: BatchCollector = BatchCollector(worker.score_batch, cfg.max_batch_size, cfg.max_wait_ms / 1e3,
                                                   pool, "router")
        collector.start()
        servicer = RouterServicer(scorer.kind, scorer.models, collector)
        reloader = None
        if cfg.artifact:
            reloader = ArtifactReloader(Path(cfg.artifact) / "meta.json", cfg.reload_poll_s, collector,
                                        validate=lambda: build_scorer(spec),
                                        make_pool=lambda: process_pool(cfg.workers, worker.init, spec),
                                        workers=cfg.workers,
                                        on_swap=lambda s: setattr(servicer, "models", s.models))
            reloader.start()

        async def close() -> None:
            if reloader:
                await reloader.close()
            await collector.close()
            collector.executor.shutdown(wait=False, cancel_futures=True)

        return [Registration(router_pb2_grpc.add_RouterServicer_to_server, servicer, SERVICE_NAME)], close

    return setup
