"""Assemble an engine service from its config: backend, servicer, status reporter."""

from __future__ import annotations

from typing import Awaitable, Callable, Sequence

from engine_svc import backends  # noqa: F401  registers the backends
from engine_svc.backends.base import EngineBackend
from engine_svc.config import EngineConfig
from engine_svc.monitor_link import MonitorLink
from engine_svc.reporter import StatusReporter
from engine_svc.servicer import EngineServicer
from hetflow.core import plugins
from hetflow.core.engine.queues import make_queue
from hetflow.runtime.server import Registration
from hetflow.runtime.tickets import TicketChecker
from hetflow.v1 import engine_pb2, engine_pb2_grpc

SERVICE_NAME = engine_pb2.DESCRIPTOR.services_by_name["Engine"].full_name


def make_backend(cfg: EngineConfig) -> EngineBackend:
    return plugins.build("engine-backend", cfg.backend, cfg=cfg, queue=make_queue(cfg.queue))


def build(cfg: EngineConfig) -> tuple[
        EngineServicer, Callable[[], Awaitable[tuple[Sequence[Registration], Callable[[], Awaitable[None]]]]]]:
    """The servicer and the ``setup`` callable ``serve_until_signal`` runs."""
    backend = make_backend(cfg)
    address = cfg.advertise_address or f"{cfg.serve.host}:{cfg.serve.port}"
    link = MonitorLink(cfg.monitor_address, cfg.serve.security) if cfg.monitor_address else None
    tickets = TicketChecker(cfg.serve.security.ticket_key(), cfg.name)
    servicer = EngineServicer(cfg.name, address, backend, cfg.max_tokens_limit, tickets, link,
                              cfg.stream_interval_tokens, cfg.max_waiting, cfg.model_server_endpoint)

    async def setup() -> tuple[Sequence[Registration], Callable[[], Awaitable[None]]]:
        await backend.start()
        reporter = StatusReporter(cfg.monitor_address, cfg.report_interval_s, servicer.status_proto,
                                  cfg.serve.security, link.monitor_answered if link else None,
                                  cfg.report_heartbeat_s) if link else None
        if reporter:
            reporter.start()

        async def draining() -> None:
            """Reported before the drain, so that the balancers stop sending calls here at once."""
            servicer.serving = False
            if reporter:
                await reporter.report_now()

        async def close() -> None:
            servicer.serving = False
            if reporter:
                await reporter.close()
            await backend.close()
            if link:
                await servicer.releases_sent()  # the direct-path ends drained calls leave, before the link goes
                await link.close()

        return [Registration(engine_pb2_grpc.add_EngineServicer_to_server, servicer, SERVICE_NAME, draining)], close

    return servicer, setup
