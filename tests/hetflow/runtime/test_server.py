"""The shared server: health Watch through the interceptor, NOT_SERVING before the port closes."""

from __future__ import annotations

import asyncio
import threading
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from hetflow.runtime.server import ServeConfig, start
from monitor_svc import app
from monitor_svc.config import MonitorConfig
from tests.factories import free_port

SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING
MONITOR = "hetflow.v1.Monitor"


async def _monitor(not_serving_s: float):
    cfg = MonitorConfig(serve=ServeConfig(port=free_port(), not_serving_s=not_serving_s))
    _, setup = app.build(cfg)
    return await start("monitor", cfg.serve, *(await setup()))


async def test_watch_streams_the_status_and_its_change_to_not_serving_on_shutdown():
    server = await _monitor(not_serving_s=0.5)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        watch = health.Watch(health_pb2.HealthCheckRequest(service=MONITOR), timeout=10)
        assert (await watch.read()).status == SERVING
        stopping = asyncio.ensure_future(server.stop())
        assert (await watch.read()).status == NOT_SERVING
        # still taking calls while it says so: a Check gets an answer, not a closed port
        reply = await health.Check(health_pb2.HealthCheckRequest(service=MONITOR), timeout=2)
        assert reply.status == NOT_SERVING
        await stopping


async def test_watch_of_an_unknown_service_says_service_unknown():
    server = await _monitor(not_serving_s=0.0)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(service="nope"), timeout=5)
            assert (await watch.read()).status == health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
            watch.cancel()
    finally:
        await server.stop()


def _burst_codes(port: int, calls: int, sent: threading.Event) -> dict[str, int]:
    """``calls`` health checks sent at once from a thread of their own (a client the server's loop does
    not run), ``sent`` set once all are on their way; each answer's status counted."""
    codes: dict[str, int] = {}
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        check = health_pb2_grpc.HealthStub(channel).Check
        futures = [check.future(health_pb2.HealthCheckRequest(service=MONITOR), timeout=60) for _ in range(calls)]
        sent.set()
        for future in futures:
            try:
                future.result()
                code = "OK"
            except grpc.RpcError as exc:
                code = exc.code().name
            codes[code] = codes.get(code, 0) + 1
    return codes


async def _burst_on_a_busy_loop(max_pending_rpcs: int, calls: int = 1500) -> dict[str, int]:
    """A burst that arrives while the server's event loop is busy (blocked until every call is sent, and
    a second more): the calls wait in gRPC's core, whose own threads read them, until the loop takes them."""
    cfg = MonitorConfig(serve=ServeConfig(port=free_port(), not_serving_s=0.0, max_pending_rpcs=max_pending_rpcs))
    _, setup = app.build(cfg)
    server = await start("monitor", cfg.serve, *(await setup()))
    sent = threading.Event()
    try:
        burst = asyncio.get_running_loop().run_in_executor(None, _burst_codes, server.port, calls, sent)
        assert sent.wait(timeout=60)  # the loop is busy: nothing takes the calls from gRPC's core meanwhile
        time.sleep(1.0)
        return await burst
    finally:
        await server.stop()


async def test_a_burst_that_waits_for_a_busy_loop_is_served_not_cancelled_by_grpc():
    assert await _burst_on_a_busy_loop(max_pending_rpcs=20_000) == {"OK": 1500}


async def test_past_max_pending_rpcs_grpc_itself_cancels_the_rest():
    """What the bound guards against, shown with a small one: gRPC's core answers CANCELLED."""
    codes = await _burst_on_a_busy_loop(max_pending_rpcs=100)
    assert codes.get("CANCELLED", 0) > 0 and codes.get("OK", 0) > 0


async def test_a_drain_notice_goes_out_while_the_service_still_says_serving_and_a_failed_one_stops_nothing():
    """An engine reports itself not serving as its shutdown starts (``Registration.on_drain``), before its
    health turns, so that no balancer sends it a new call while it drains; a notice that fails is logged."""
    import dataclasses

    cfg = MonitorConfig(serve=ServeConfig(port=free_port(), not_serving_s=0.0))
    _, setup = app.build(cfg)
    registrations, close = await setup()
    seen: list[int] = []

    async def drain() -> None:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{cfg.serve.port}") as channel:
            reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=MONITOR),
                                                                     timeout=2)
        seen.append(reply.status)
        raise RuntimeError("the monitor is away")

    server = await start("monitor", cfg.serve, [dataclasses.replace(registrations[0], on_drain=drain)], close)
    await asyncio.wait_for(server.stop(), 30)
    assert seen == [SERVING]


async def test_a_service_that_cannot_bind_its_port_closes_what_its_setup_made(monkeypatch):
    import socket

    import pytest

    from hetflow.runtime import server

    monkeypatch.setattr(server, "configure", lambda *args: None)  # the process's logging left as the tests have it
    closed: list[bool] = []

    async def close() -> None:
        closed.append(True)

    async def setup():
        return [], close

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        cfg = ServeConfig(host="127.0.0.1", port=taken.getsockname()[1])
        with pytest.raises(RuntimeError, match="bind"):
            await server.serve_until_signal("test", cfg, setup)
    assert closed == [True]
