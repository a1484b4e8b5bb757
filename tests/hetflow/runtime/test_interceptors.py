"""The interceptor's streaming wrapper: a caller's cancel closes the handler at once and is counted
CANCELLED, wherever in the stream it lands."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health_pb2

from hetflow.runtime.interceptors import RPC_HANDLED, ServiceInterceptor, never_fits, retry_pushback_s, rpc_error
from tests.factories import wait_until

SERVICE, METHOD = "test-streams", "Flood"


def _flood(closed: list[str]):
    """A handler that never waits between messages, so a cancel lands while a message is being sent."""

    async def flood(request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext):
        try:
            while True:
                yield health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)
        finally:
            closed.append("closed")

    return flood


async def test_a_cancel_that_lands_mid_send_closes_the_handler_and_counts_cancelled_not_ok():
    closed: list[str] = []

    def counted(code: str) -> float:
        return RPC_HANDLED.labels(SERVICE, METHOD, code)._value.get()

    cancelled, ok = counted("CANCELLED"), counted("OK")
    server = grpc.aio.server(interceptors=[ServiceInterceptor(SERVICE)])
    handler = grpc.unary_stream_rpc_method_handler(
        _flood(closed), request_deserializer=health_pb2.HealthCheckRequest.FromString,
        response_serializer=health_pb2.HealthCheckResponse.SerializeToString)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Streams", {METHOD: handler}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.unary_stream(
                f"/test.Streams/{METHOD}", request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
                response_deserializer=health_pb2.HealthCheckResponse.FromString)(health_pb2.HealthCheckRequest())
            read = 0
            async for _ in call:
                read += 1
                if read == 50:
                    break
            call.cancel()
            await wait_until(lambda: counted("CANCELLED") == cancelled + 1)
        assert closed == ["closed"]
        assert counted("OK") == ok
    finally:
        await server.stop(0)


def test_a_refusal_raised_on_the_clients_side_carries_the_pushback_the_server_would_send():
    """``rpc_error`` (a decision stream's or a batch's item) carries what ``_abort`` sends on the wire: the
    hint in ms, -1 for a hint-less RESOURCE_EXHAUSTED (the call never fits), nothing for other codes."""
    hinted = rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "queue full", 1.5)
    never = rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "needs 9000 KV tokens")
    down = rpc_error(grpc.StatusCode.UNAVAILABLE, "no engine")
    assert retry_pushback_s(hinted) == 1.5 and not never_fits(hinted)
    assert retry_pushback_s(never) is None and never_fits(never)
    assert not dict(down.trailing_metadata()) and not never_fits(down)
