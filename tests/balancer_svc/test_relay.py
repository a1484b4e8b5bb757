"""The relay's reading of an engine's refusal before the first token (``balancer_svc/relay.py``)."""

from __future__ import annotations

from types import SimpleNamespace

import grpc
import pytest

from balancer_svc.dispatcher import NeverReached
from balancer_svc.relay import Relay
from hetflow.core.errors import ResourceExhausted
from hetflow.runtime.interceptors import RETRY_PUSHBACK_KEY
from hetflow.v1 import engine_pb2


class _ReleaseRecorder:
    def __init__(self) -> None:
        self.released: list[tuple[str, str]] = []

    def release_later(self, request_id: str, output_tokens: int, outcome: str, *_: object) -> None:
        self.released.append((request_id, outcome))


async def _refusing_engine(pushback_ms: str | None) -> tuple[grpc.aio.Server, str]:
    """An engine whose every Generate is refused RESOURCE_EXHAUSTED with the given pushback (or none)."""

    async def generate(request: bytes, context: grpc.aio.ServicerContext) -> None:
        if pushback_ms is not None:
            context.set_trailing_metadata(((RETRY_PUSHBACK_KEY, pushback_ms),))
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "no room here")

    handler = grpc.method_handlers_generic_handler("hetflow.v1.Engine", {
        "Generate": grpc.unary_stream_rpc_method_handler(generate)})
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


async def _refusal(pushback_ms: str | None) -> tuple[NeverReached, _ReleaseRecorder]:
    server, address = await _refusing_engine(pushback_ms)
    channel = grpc.aio.insecure_channel(address)
    monitor_view = _ReleaseRecorder()
    dispatcher = SimpleNamespace(channel=lambda _address: channel, monitor_view=monitor_view,
                                 engine_request=lambda *_, **__: engine_pb2.EngineGenerateRequest(request_id="r1"),
                                 sent=lambda _dispatch: None)
    dispatch = SimpleNamespace(engine=SimpleNamespace(engine_id="e0", address=address), admitted=None)
    call = SimpleNamespace(request_id="r1", want_receipt=False)
    try:
        with pytest.raises(NeverReached) as refused:
            async for _ in Relay(dispatcher).stream(call, dispatch, 5.0):  # type: ignore[arg-type]
                pass
        return refused.value, monitor_view
    finally:
        await channel.close()
        await server.stop(None)


@pytest.mark.parametrize("pushback_ms, retry_after_s", [("1500", 1.5), ("0", 0.0), ("-1", None), (None, None)])
async def test_an_engine_refusal_passes_its_retry_hint_on(pushback_ms, retry_after_s):
    """gRPC's pushback "-1" says trying again cannot help: the caller gets no hint (it read as 0 ms, a
    retry at once), and a refusal with a hint passes it on as the caller's own."""
    refused, monitor_view = await _refusal(pushback_ms)
    assert refused.code == grpc.StatusCode.RESOURCE_EXHAUSTED and refused.engine_id == "e0"
    assert refused.retry_after_s == retry_after_s
    error = refused.as_error()
    assert isinstance(error, ResourceExhausted) and error.retry_after_s == retry_after_s
    assert monitor_view.released == [("r1", "engine-error:RESOURCE_EXHAUSTED")]  # the entry is never lost
