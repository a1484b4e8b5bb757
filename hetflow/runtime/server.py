"""Start a grpc.aio service on uvloop with health, reflection, metrics and graceful shutdown.

Shutdown follows gRPC's own example: SIGTERM -> health NOT_SERVING, answered for ``not_serving_s``
while calls are still taken (so Check and Watch clients see it before the port closes) ->
``server.stop(grace)`` (in-flight calls drain for up to ``grace_s``) -> the service's own ``close``.
"""

from __future__ import annotations

import asyncio
import signal
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Mapping, Sequence

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import start_http_server

from hetflow.runtime.channels import SERVER_OPTIONS
from hetflow.runtime.interceptors import ServiceInterceptor
from hetflow.runtime.logs import configure, get_logger
from hetflow.runtime.security import SecurityConfig, server_credentials

log = get_logger(__name__)


@dataclass(frozen=True)
class ServeConfig:
    """Where and how a service listens; every service config carries one as ``serve``."""

    host: str = "127.0.0.1"
    """Address to bind."""
    port: int = 0
    """gRPC port; 0 picks a free one (tests)."""
    metrics_port: int = 0
    """Prometheus /metrics HTTP port; 0 disables it."""
    grace_s: float = 5.0
    """How long in-flight calls may drain on SIGTERM before they are cancelled."""
    not_serving_s: float = 1.0
    """How long health answers NOT_SERVING on SIGTERM, still taking calls, before the drain starts."""
    log_level: str = "info"
    max_pending_rpcs: int = 20_000
    """Calls gRPC's core holds for the service before its event loop takes them. gRPC's defaults (1,000,
    then a random share up to 3,000) cancel the rest with status CANCELLED, which a client cannot tell
    from its own cancellation and does not retry: under 3x overload a few percent of calls ended so, in
    milliseconds, before the service's own admission (RESOURCE_EXHAUSTED with a retry hint) could answer
    them (docs/reliability.md, "Overload again"). Past this many, gRPC still cancels them."""
    security: SecurityConfig = field(default_factory=SecurityConfig)
    """TLS, API keys and service identity: the stack's ``security`` section (``hetflow.runtime.security``)."""

    def __post_init__(self) -> None:
        if self.max_pending_rpcs < 1:
            raise ValueError(f"serve.max_pending_rpcs must be at least 1, got {self.max_pending_rpcs}")


DRAIN_NOTICE_MAX_S = 2.0
"""How long a service's notice that it drains (``Registration.on_drain``) may take before the shutdown goes
on without it."""
STREAMING_GRACE_S = 30.0
"""``grace_s`` of the services that carry LLM calls' token streams (engines, the gateway) unless their
section sets one: a call of a thousand tokens streams for tens of seconds."""
CLOSE_MARGIN_S = 5.0
"""What a service's own ``close`` may take after its drain, in ``stop_within_s``."""


def stop_within_s(serve: Mapping[str, Any], default_grace_s: float) -> float:
    """How long a service of these ``serve`` settings (its section's, as the stack YAML writes them) takes
    at most to stop on SIGTERM: its drain notice, ``not_serving_s``, ``grace_s`` and its close. What the
    supervisor waits before SIGKILL, and the orchestrators' grace (compose, Kubernetes)."""
    return (DRAIN_NOTICE_MAX_S + float(serve.get("not_serving_s", ServeConfig.not_serving_s))
            + float(serve.get("grace_s", default_grace_s)) + CLOSE_MARGIN_S)


@dataclass
class Registration:
    """A servicer to add: the generated ``add_XServicer_to_server`` and the full service name."""

    add_to_server: Callable[[object, grpc.aio.Server], None]
    servicer: object
    full_name: str
    on_drain: Callable[[], Awaitable[None]] | None = None
    """Run as the shutdown starts, before the health turns: the service tells whoever routes calls to it
    that it is going (an engine tells its monitor), so that no new call is sent it while it drains."""


class RunningServer:
    """A started server; ``stop`` runs the graceful-shutdown sequence once."""

    def __init__(self, server: grpc.aio.Server, health_servicer: health.aio.HealthServicer, port: int,
                 close: Callable[[], Awaitable[None]] | None, cfg: ServeConfig,
                 drains: Sequence[Callable[[], Awaitable[None]]] = ()):
        self.server, self.port = server, port
        self._health, self._close, self._cfg, self._drains = health_servicer, close, cfg, drains
        self._stopped = False

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        for drain in self._drains:
            try:
                await asyncio.wait_for(drain(), DRAIN_NOTICE_MAX_S)
            except Exception as exc:   # the drain goes on: peers then learn of it as they would of a death
                log.warning("drain_notice_failed", error=repr(exc))
        await self._health.enter_graceful_shutdown()
        await asyncio.sleep(self._cfg.not_serving_s)
        await self.server.stop(self._cfg.grace_s)
        if self._close is not None:
            await self._close()


async def start(service: str, cfg: ServeConfig, registrations: Sequence[Registration],
                close: Callable[[], Awaitable[None]] | None = None) -> RunningServer:
    """Start the server and mark every registered service SERVING."""
    server = grpc.aio.server(interceptors=[ServiceInterceptor(service, cfg.security)], options=[
        ("grpc.so_reuseport", 0),
        ("grpc.max_receive_message_length", 64 * 1024 * 1024),
        ("grpc.server.max_pending_requests", cfg.max_pending_rpcs),
        ("grpc.server.max_pending_requests_hard_limit", cfg.max_pending_rpcs),  # no random early cancels below it
        *SERVER_OPTIONS,
    ])
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    names = [r.full_name for r in registrations]
    for r in registrations:
        r.add_to_server(r.servicer, server)
    reflection.enable_server_reflection(
        [*names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME], server)
    credentials = server_credentials(cfg.security)
    address = f"{cfg.host}:{cfg.port}"
    port = server.add_insecure_port(address) if credentials is None else server.add_secure_port(address, credentials)
    if port == 0:
        raise RuntimeError(f"{service}: could not bind {cfg.host}:{cfg.port}")
    await server.start()
    for name in ["", *names]:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    log.info("serving", address=f"{cfg.host}:{port}", services=names)
    return RunningServer(server, health_servicer, port, close, cfg,
                         [r.on_drain for r in registrations if r.on_drain is not None])


async def serve_until_signal(
        service: str, cfg: ServeConfig,
        setup: Callable[[], Awaitable[tuple[Sequence[Registration], Callable[[], Awaitable[None]] | None]]]) -> None:
    """Run a service until SIGTERM or SIGINT, then shut it down gracefully."""
    configure(service, cfg.log_level)
    if cfg.metrics_port:
        start_http_server(cfg.metrics_port, addr=cfg.host)
    registrations, close = await setup()
    try:
        running = await start(service, cfg, registrations, close)
    except BaseException:  # a port in use: what setup made (workers, artifact copies) is closed
        if close is not None:
            await _close_quietly(service, close, cfg.grace_s)
        raise
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting_down", grace_s=cfg.grace_s)
    await running.stop()
    log.info("stopped")


async def _close_quietly(service: str, close: Callable[[], Awaitable[None]], grace_s: float) -> None:
    """``close`` within ``grace_s``; its failure logged, so that the failure that stopped the start is the
    one raised."""
    try:
        await asyncio.wait_for(close(), grace_s)
    except Exception as exc:  # noqa: BLE001 - the start's own failure is what the operator must see
        log.error("close_after_failed_start", service=service, error=f"{type(exc).__name__}: {exc}")


def run(main: Awaitable[None]) -> None:
    """Run ``main`` on uvloop."""
    import uvloop

    uvloop.run(main)  # type: ignore[arg-type]
