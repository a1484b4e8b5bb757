"""Assemble the balancer service."""

from __future__ import annotations

import asyncio
import signal
from typing import Awaitable, Callable, Sequence

from balancer_svc import judge_artifact
from balancer_svc.config import BalancerConfig
from balancer_svc.dispatcher import Dispatcher
from balancer_svc.endpoint_picker import EXT_PROC_SERVICE_NAME, EndpointPicker, ext_proc_grpc
from balancer_svc.front import Front
from balancer_svc.live_alpha import AlphaReplay
from balancer_svc.servicer import BalancerServicer
from hetflow.runtime.server import Registration
from hetflow.v1 import balancer_pb2, balancer_pb2_grpc

SERVICE_NAME = balancer_pb2.DESCRIPTOR.services_by_name["Balancer"].full_name


def build(cfg: BalancerConfig, alpha_replay: AlphaReplay | None = None,
          reload: Callable[[], BalancerConfig] | None = None,
          ) -> Callable[[], Awaitable[tuple[Sequence[Registration], Callable[[], Awaitable[None]]]]]:
    """``reload``: reads the config again; given, SIGHUP switches the balancer to its cascade (``Front``)."""
    if not cfg.monitor_address:
        raise ValueError("balancer.monitor_address is required (or a monitor section with a port)")
    if cfg.cascade is not None and cfg.cascade.judge.kind == "learned":
        judge_artifact.load(cfg.cascade.judge.artifact, cfg.cascade.models)  # refused at start, with the reason

    async def setup() -> tuple[Sequence[Registration], Callable[[], Awaitable[None]]]:
        dispatcher = Dispatcher(cfg, alpha_replay)
        dispatcher.start()
        front = Front(dispatcher, cfg.cascade)
        if reload is not None:
            asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, front.reload, reload)
        servicer = BalancerServicer(dispatcher, front.serve, front.cascade_config)
        registrations = [Registration(balancer_pb2_grpc.add_BalancerServicer_to_server, servicer, SERVICE_NAME)]
        if cfg.endpoint_picker_model:
            registrations.append(Registration(
                ext_proc_grpc.add_ExternalProcessorServicer_to_server,
                EndpointPicker(dispatcher, cfg.endpoint_picker_model), EXT_PROC_SERVICE_NAME))
        return registrations, dispatcher.close

    return setup
