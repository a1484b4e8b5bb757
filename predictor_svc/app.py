"""Assemble the predictor service."""

from __future__ import annotations

from pathlib import Path
from typing import Awaitable, Callable, Sequence

from hetflow.runtime.batching import BatchCollector
from hetflow.runtime.reloader import ArtifactReloader
from hetflow.runtime.server import Registration
from hetflow.runtime.workers import process_pool, warm_pool
from hetflow.v1 import predictor_pb2, predictor_pb2_grpc
from predictor_svc import worker
from predictor_svc.config import PredictorConfig
from predictor_svc.predictors import build_predictor
from predictor_svc.servicer import PredictorServicer

SERVICE_NAME = predictor_pb2.DESCRIPTOR.services_by_name["Predictor"].full_name


def build(cfg: PredictorConfig) -> Callable[[], Awaitable[tuple[Sequence[Registration], Callable[[], Awaitable[None]]]]]:
    predictor = build_predictor(cfg.predictor_spec())  # fail at start, here, on a bad spec or artifact
    spec = cfg.predictor_spec()

    async def setup() -> tuple[Sequence[Registration], Callable[[], Awaitable[None]]]:
        pool = process_pool(cfg.workers, worker.init, spec)
        await warm_pool(pool, cfg.workers)
        collector: BatchCollector = BatchCollector(worker.predict_batch, cfg.max_batch_size, cfg.max_wait_ms / 1e3,
                                                   pool, "predictor")
        collector.start()
        servicer = PredictorServicer(predictor.kind, collector)
        reloader = None
        if cfg.artifact:
            reloader = ArtifactReloader(Path(cfg.artifact) / "meta.json", cfg.reload_poll_s, collector,
                                        validate=lambda: build_predictor(spec),
                                        make_pool=lambda: process_pool(cfg.workers, worker.init, spec),
                                        workers=cfg.workers,
                                        on_swap=lambda p: setattr(servicer, "kind", p.kind))
            reloader.start()

        async def close() -> None:
            if reloader:
                await reloader.close()
            await collector.close()
            collector.executor.shutdown(wait=False, cancel_futures=True)

        return [Registration(predictor_pb2_grpc.add_PredictorServicer_to_server, servicer, SERVICE_NAME)], close

    return setup
