"""The shared server: health Watch through the interceptor, NOT_SERVING before the port closes."""

from __future__ import annotations

import asyncio

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
