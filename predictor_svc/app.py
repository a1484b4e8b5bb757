"""Assemble the predictor service."""

from __future__ import annotations

from typing import Awaitable, Callable, Sequence

from hetflow.runtime.model_service import start_model_workers
from hetflow.runtime.server import Registration
from hetflow.v1 import predictor_pb2, predictor_pb2_grpc
from predictor_svc import worker
from predictor_svc.config import PredictorConfig
from predictor_svc.predictors import build_predictor
from predictor_svc.servicer import PredictorServicer

SERVICE_NAME = predictor_pb2.DESCRIPTOR.services_by_name["Predictor"].full_name


def build(cfg: PredictorConfig,
          ) -> Callable[[], Awaitable[tuple[Sequence[Registration], Callable[[], Awaitable[None]]]]]:
    spec = cfg.predictor_spec()
    build_predictor(spec)  # to fail here, before the service starts, on a bad spec or artifact

    async def setup() -> tuple[Sequence[Registration], Callable[[], Awaitable[None]]]:
        workers, served = await start_model_workers(  # on_swap runs on a reload, after the servicer exists
            "predictor", spec, cfg.worker_processes(), cfg.max_batch_size, cfg.max_wait_ms / 1e3, worker.init,
            worker.predict_batch, cfg.reload_poll_s, build_predictor,
            on_swap=lambda p: setattr(servicer, "kind", p.type_name))
        servicer = PredictorServicer(served.type_name, workers.collector)  # the workers hold the model
        return [Registration(predictor_pb2_grpc.add_PredictorServicer_to_server, servicer, SERVICE_NAME)], workers.close

    return setup
