"""hetflow's channels: a peer whose connection takes a while to set up is waited for, not failed.

gRPC takes ``grpc.min_reconnect_backoff_ms`` as the shortest time it gives a connection attempt
(``ParseArgsForBackoffValues`` in grpc's subchannel.cc). At 100 ms, a handshake slowed by a loaded
host or a distant peer failed calls UNAVAILABLE before they were sent ("tcp handshaker shutdown"; a
loaded test run found it, issue 31).
"""

from __future__ import annotations

import asyncio
import contextlib

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from hetflow.core.errors import ResourceExhausted
from hetflow.runtime.channels import CHANNEL_OPTIONS, open_channel
from hetflow.runtime.interceptors import ServiceInterceptor

SETUP_DELAY_S = 0.4
"""How long the slow link holds a new connection before passing bytes: past 100 ms, well inside 5 s."""


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


async def _slow_link(target_port: int) -> asyncio.Server:
    """A TCP relay that waits ``SETUP_DELAY_S`` before connecting each client to the target."""
    async def relay(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(SETUP_DELAY_S)
        server_reader, server_writer = await asyncio.open_connection("127.0.0.1", target_port)
        await asyncio.gather(_pipe(client_reader, server_writer), _pipe(server_reader, client_writer))

    return await asyncio.start_server(relay, "127.0.0.1", 0)


async def test_a_call_over_a_link_slow_to_set_up_is_served():
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    link = await _slow_link(port)
    try:
        channel = open_channel(f"127.0.0.1:{link.sockets[0].getsockname()[1]}")
        reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        await channel.close()
    finally:
        link.close()
        await server.stop(0)


def test_connection_attempts_get_seconds_and_reconnects_stay_quick():
    options = dict(CHANNEL_OPTIONS)
    assert options["grpc.min_reconnect_backoff_ms"] >= 5000  # the time a connection attempt gets
    assert options["grpc.initial_reconnect_backoff_ms"] <= 100 and options["grpc.max_reconnect_backoff_ms"] <= 1000


class _Refusing(health.aio.HealthServicer):
    """Refuses its first ``refusals`` calls (with ``retry_after_s`` as the hint, or none), then serves."""

    def __init__(self, refusals: int, retry_after_s: float | None) -> None:
        super().__init__()
        self.refusals, self.retry_after_s, self.calls = refusals, retry_after_s, 0

    async def Check(self, request, context):
        self.calls += 1
        if self.calls <= self.refusals:
            raise ResourceExhausted("busy", retry_after_s=self.retry_after_s)
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)


async def _checked(servicer: _Refusing, refusal_attempts: int) -> grpc.StatusCode:
    server = grpc.aio.server(interceptors=[ServiceInterceptor("test-refusals")])
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with open_channel(f"127.0.0.1:{port}", refusal_attempts=refusal_attempts) as channel:
            try:
                await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=30)
            except grpc.aio.AioRpcError as err:
                return err.code()
            return grpc.StatusCode.OK
    finally:
        await server.stop(0)


async def test_a_channel_sends_a_refused_call_again_after_the_hint_up_to_its_attempts():
    assert await _checked(_Refusing(2, 0.05), refusal_attempts=3) == grpc.StatusCode.OK
    once = _Refusing(2, 0.05)
    assert await _checked(once, refusal_attempts=1) == grpc.StatusCode.RESOURCE_EXHAUSTED and once.calls == 1
    short = _Refusing(5, 0.05)
    assert await _checked(short, refusal_attempts=3) == grpc.StatusCode.RESOURCE_EXHAUSTED and short.calls == 3


async def test_a_refusal_without_a_hint_is_not_sent_again():
    hopeless = _Refusing(5, None)
    assert await _checked(hopeless, refusal_attempts=5) == grpc.StatusCode.RESOURCE_EXHAUSTED and hopeless.calls == 1
