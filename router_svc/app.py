"""Assemble the router service."""

from __future__ import annotations

from typing import Awaitable, Callable, Sequence

from hetflow.runtime.model_service import start_model_workers
from hetflow.runtime.server import Registration
from hetflow.v1 import router_pb2, router_pb2_grpc
from router_svc import worker
from router_svc.config import RouterConfig
from router_svc.scorers import build_scorer
from router_svc.servicer import RouterServicer

SERVICE_NAME = router_pb2.DESCRIPTOR.services_by_name["Router"].full_name


def build(cfg: RouterConfig) -> Callable[[], Awaitable[tuple[Sequence[Registration], Callable[[], Awaitable[None]]]]]:
    spec = cfg.scorer_spec()
    build_scorer(spec)  # to fail here, before the service starts, on a bad spec or artifact

    async def setup() -> tuple[Sequence[Registration], Callable[[], Awaitable[None]]]:
        workers, served = await start_model_workers(  # on_swap runs on a reload, after the servicer exists
            "router", spec, cfg.worker_processes(), cfg.max_batch_size, cfg.max_wait_ms / 1e3, worker.init,
            worker.score_batch, cfg.reload_poll_s, build_scorer,
            on_swap=lambda s: setattr(servicer, "models", s.models))
        servicer = RouterServicer(served.type_name, served.models, workers.collector)  # the workers hold the model
        return [Registration(router_pb2_grpc.add_RouterServicer_to_server, servicer, SERVICE_NAME)], workers.close

    return setup
