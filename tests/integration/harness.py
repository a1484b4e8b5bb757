"""Start a whole stack in the test's event loop, every service on its own loopback port."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable

import grpc

from balancer_svc import app as balancer_app
from balancer_svc.config import from_stack as balancer_config
from engine_svc import app as engine_app
from engine_svc.config import from_stack as engine_config
from hetflow.runtime.channels import open_channel
from hetflow.runtime.security import stack_security
from hetflow.runtime.server import RunningServer, start
from hetflow.v1 import monitor_pb2, monitor_pb2_grpc
from monitor_svc import app as monitor_app
from monitor_svc.config import from_stack as monitor_config
from predictor_svc import app as predictor_app
from predictor_svc.config import from_stack as predictor_config
from router_svc import app as router_app
from router_svc.config import from_stack as router_config
from simulator.tuning import replay_best_alpha
from tests.factories import free_port

SMALL, LARGE = "qwen2.5-1.5b-instruct", "qwen2.5-7b-instruct"


@dataclass
class Stack:
    raw: dict[str, Any]
    servers: dict[str, RunningServer] = field(default_factory=dict)
    engine_servicers: dict[str, Any] = field(default_factory=dict)
    balancer_servicer: Any = None
    base_url: str = ""
    """The gateway's (``/v1``), when one serves it (``with_gateway``)."""

    def address(self, name: str) -> str:
        return f"127.0.0.1:{self.servers[name].port}"

    async def snapshot(self) -> monitor_pb2.MonitorSnapshot:
        # A channel of its own (gRPC shares subchannels between channels of equal options: one opened as the
        # services open theirs would share their reconnect backoff to a restarted monitor).
        security = stack_security(self.raw, "operator")
        channel = open_channel(self.address("monitor"), security) if self.raw.get("security") else \
            grpc.aio.insecure_channel(self.address("monitor"))
        async with channel as ch:  # 30 s: a bound on waiting (the loop it shares can stall seconds on a loaded host)
            return await monitor_pb2_grpc.MonitorStub(ch).Snapshot(monitor_pb2.SnapshotRequest(request_ids=True),
                                                                   timeout=30)

    async def stop(self, name: str) -> None:
        await self.servers.pop(name).stop()

    async def start_monitor(self) -> None:
        """A new monitor process's state on the configured port: nothing in flight, no engine known."""
        cfg = monitor_config(self.raw)
        _, setup = monitor_app.build(cfg)
        self.servers["monitor"] = await start("monitor", cfg.serve, *(await setup()))

    async def close(self) -> None:
        for name in reversed(list(self.servers)):
            await self.servers[name].stop()


def stack_config(engines: list[dict[str, Any]] | None = None, **balancer: Any) -> dict[str, Any]:
    engines = engines if engines is not None else [
        {"name": "small-0", "profile": f"{SMALL}@a6000"}, {"name": "large-0", "profile": f"{LARGE}@a6000"}]
    quick = {"not_serving_s": 0.0, "grace_s": 5.0}  # teardown need not wait for health watchers, nor long drains
    # Every service of an in-process stack shares one event loop with the test's clients, so neither its lag
    # nor a call's wait to be taken (which holds the client's own turns on that loop: 742 ms for twelve
    # workflows sent at once on a loaded CI host) says anything about a balancer process of its own: no
    # shedding on either here (tests/core/test_load_shedding.py and tests/balancer_svc/test_dispatcher_shedding.py
    # test the rules; the reliability bench measures them on real processes).
    balancer = {"max_loop_lag_s": 0.0, "accept_wait_target_s": 0.0, **balancer}
    return {
        "stack": {"name": "test", "host": "127.0.0.1"},
        # 5 s: every service shares the test's one event loop, which a loaded host can stall past a second
        # between an engine's reports (a stale engine is unhealthy: "no healthy engine serves any model")
        "monitor": {"port": free_port(), "engine_stale_after_s": 5.0, **quick},
        "router": {"port": free_port(), "models": {SMALL: 0.4, LARGE: 0.7}, "max_wait_ms": 1, **quick},
        "predictor": {"port": free_port(), "max_wait_ms": 1, **quick},
        "balancer": {"port": free_port(), **quick, **balancer},
        "engines": [{"backend": "sim", "port": free_port(), "report_interval_s": 0.1, **quick, **e} for e in engines],
    }


async def start_stack(raw: dict[str, Any], engines_healthy: bool = True) -> Stack:
    """The stack, once every engine has reported (and is healthy, unless ``engines_healthy`` is False)."""
    stack = Stack(raw)
    await stack.start_monitor()
    for name, config, app in (("router", router_config, router_app), ("predictor", predictor_config, predictor_app)):
        cfg = config(raw)
        stack.servers[name] = await start(name, cfg.serve, *(await app.build(cfg)()))
    for engine in raw["engines"]:
        cfg = engine_config(raw, engine["name"])
        servicer, setup = engine_app.build(cfg)
        stack.engine_servicers[engine["name"]] = servicer
        stack.servers[engine["name"]] = await start(engine["name"], cfg.serve, *(await setup()))
    cfg = balancer_config(raw)
    registrations, close = await balancer_app.build(cfg, alpha_replay=replay_best_alpha)()
    stack.balancer_servicer = registrations[0].servicer
    stack.servers["balancer"] = await start("balancer", cfg.serve, registrations, close)
    await wait_for_engines(stack, len(raw["engines"]), healthy=engines_healthy)
    return stack


async def wait_for_engines(stack: Stack, count: int, timeout_s: float = 10.0, healthy: bool = True) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        snap = await stack.snapshot()
        if sum(e.healthy or not healthy for e in snap.engines) >= count:
            return
        await asyncio.sleep(0.05)
    raise TimeoutError("engines did not report to the monitor")


async def wait_for_snapshot(stack: Stack, holds: Callable[[monitor_pb2.MonitorSnapshot], bool],
                            give_up_s: float = 15.0) -> monitor_pb2.MonitorSnapshot:
    """The monitor's first snapshot for which ``holds``, or its last within ``give_up_s`` (a bound on
    waiting, not a timing under test)."""
    loop = asyncio.get_running_loop()
    end_s = loop.time() + give_up_s
    snap = await stack.snapshot()
    while not holds(snap) and loop.time() < end_s:
        await asyncio.sleep(0.1)
        snap = await stack.snapshot()
    return snap


async def wait_until_idle(stack: Stack, timeout_s: float = 10.0) -> monitor_pb2.MonitorSnapshot:
    """Until the monitor holds no in-flight entry and every engine reports no active request."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    snap = await stack.snapshot()
    while asyncio.get_running_loop().time() < deadline:
        snap = await stack.snapshot()
        if all(e.in_flight_requests == 0 and not e.status.active_request_ids for e in snap.engines):
            return snap
        await asyncio.sleep(0.05)
    return snap


@contextlib.asynccontextmanager
async def serving_gateway(raw: dict[str, Any], **tls: str) -> AsyncIterator[str]:
    """The stack's gateway (``raw["gateway"]``) in the test's event loop; yields its base URL (``/v1``).
    ``tls``: uvicorn's ``ssl_certfile`` and ``ssl_keyfile`` for HTTPS."""
    import uvicorn

    from gateway_svc.app import build
    from gateway_svc.config import from_stack

    port = raw["gateway"]["port"]
    server = uvicorn.Server(uvicorn.Config(build(from_stack(raw)), host="127.0.0.1", port=port, loop="none",
                                           lifespan="on", log_config=None, **tls))
    serving = asyncio.ensure_future(server.serve())
    try:
        while not server.started:
            assert not serving.done(), "the gateway did not start"
            await asyncio.sleep(0.02)
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        await serving


@contextlib.asynccontextmanager
async def with_gateway(raw: dict[str, Any], **gateway: Any) -> AsyncIterator[Stack]:
    """The stack of ``raw`` and its gateway (``gateway``: settings besides a free port), ``base_url`` set."""
    raw["gateway"] = {"port": free_port(), **gateway}
    stack = await start_stack(raw)
    try:
        async with serving_gateway(raw) as base_url:
            stack.base_url = base_url
            yield stack
    finally:
        await stack.close()
