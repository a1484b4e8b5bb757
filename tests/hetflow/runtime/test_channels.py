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

from hetflow.runtime.channels import CHANNEL_OPTIONS, open_channel

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
