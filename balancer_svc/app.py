"""Assemble the balancer service."""

from __future__ import annotations

from typing import Awaitable, Callable, Sequence

from balancer_svc import judge_artifact
from balancer_svc.cascade import CascadeServing
from balancer_svc.config import BalancerConfig
from balancer_svc.dispatcher import Dispatcher
from balancer_svc.judges import Judge, LearnedJudge, LlmJudge
from balancer_svc.live_alpha import AlphaReplay
from balancer_svc.servicer import BalancerServicer
from hetflow.runtime.server import Registration
from hetflow.v1 import balancer_pb2, balancer_pb2_grpc

SERVICE_NAME = balancer_pb2.DESCRIPTOR.services_by_name["Balancer"].full_name


def build(cfg: BalancerConfig, alpha_replay: AlphaReplay | None = None,
          ) -> Callable[[], Awaitable[tuple[Sequence[Registration], Callable[[], Awaitable[None]]]]]:
    if not cfg.monitor_address:
        raise ValueError("balancer.monitor_address is required (or a monitor section with a port)")
    scorer = (judge_artifact.load(cfg.cascade.judge.artifact, cfg.cascade.models)
              if cfg.cascade is not None and cfg.cascade.judge.kind == "learned" else None)

    async def setup() -> tuple[Sequence[Registration], Callable[[], Awaitable[None]]]:
        dispatcher = Dispatcher(cfg, alpha_replay)
        dispatcher.start()
        serve = dispatcher.serve
        if cfg.cascade is not None:
            judge: Judge = LearnedJudge(scorer) if scorer is not None else LlmJudge(cfg.cascade.judge,
                                                                                     dispatcher.serve_admitted)
            serve = CascadeServing(dispatcher, cfg.cascade, judge).serve
        servicer = BalancerServicer(dispatcher, serve)
        return ([Registration(balancer_pb2_grpc.add_BalancerServicer_to_server, servicer, SERVICE_NAME)],
                dispatcher.close)

    return setup
