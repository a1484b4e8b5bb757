"""The Python client's direct path, without a stack: what it makes of an engine stream."""

from __future__ import annotations

import pytest

import hetflow.client as client_module
from hetflow.client import HetflowClient, build_request
from hetflow.core.errors import Unavailable
from hetflow.v1 import balancer_pb2


class _Stream:
    """A DirectCall stand-in that yields the chunks it was given."""

    chunks: list[balancer_pb2.GenerateChunk] = []

    def __init__(self, *args: object, **kwargs: object) -> None:
        self._left = list(self.chunks)

    def __aiter__(self) -> _Stream:
        return self

    async def __anext__(self) -> balancer_pb2.GenerateChunk:
        if not self._left:
            raise StopAsyncIteration
        return self._left.pop(0)


@pytest.fixture
def stream(monkeypatch):
    monkeypatch.setattr(client_module, "DirectCall", _Stream)
    return _Stream


async def test_a_direct_call_that_ends_without_a_chunk_is_unavailable_as_on_the_relay(stream):
    stream.chunks = []
    async with HetflowClient("127.0.0.1:1", direct=True) as client:
        with pytest.raises(Unavailable, match="without a reply"):
            await client.complete(build_request([("user", "hi")], max_tokens=4))


async def test_a_direct_call_joins_its_chunks_with_placement_from_the_first_and_usage_from_the_last(stream):
    first = balancer_pb2.GenerateChunk(request_id="r", text="he", model="m", engine_id="e0", output_tokens=1)
    last = balancer_pb2.GenerateChunk(request_id="r", text="llo", output_tokens=2, finished=True,
                                      finish_reason="length", queued_s=0.5)
    last.usage.prompt_tokens, last.usage.output_tokens = 3, 2
    stream.chunks = [first, last]
    async with HetflowClient("127.0.0.1:1", direct=True) as client:
        result = await client.complete(build_request([("user", "hi")], max_tokens=2))
    assert (result.text, result.finish_reason, result.model, result.engine_id) == ("hello", "length", "m", "e0")
    assert (result.prompt_tokens, result.output_tokens, result.queued_s) == (3, 2, 0.5)


class _FailingOnce:
    """A client whose first call fails (a refusal the caller then retries), recording each call."""

    def __init__(self) -> None:
        self.requests: list = []
        self.timeouts_s: list = []

    async def complete(self, request, timeout_s=None):
        self.requests.append(request)
        self.timeouts_s.append(timeout_s)
        if len(self.requests) == 1:
            raise RuntimeError("refused")
        return client_module.CallResult(request.request_id, "ok", "stop", 1, 1, "m", "e", 0.0)


async def test_a_retried_stage_keeps_its_index_and_each_call_waits_no_longer_than_the_programs_deadline():
    import time

    caller = _FailingOnce()
    program = client_module.Program(caller, "code", 2, {"deadline_unix_s": time.time() + 60.0})
    with pytest.raises(RuntimeError):
        await program.complete("planner", [("user", "plan")], 8, timeout_s=120.0)
    await program.complete("planner", [("user", "plan")], 8, timeout_s=120.0)   # the caller's retry
    await program.complete("coder", [("user", "code")], 8, timeout_s=120.0)
    stages = [(r.workflow.agent, r.workflow.stage_index, r.workflow.upstream_agent) for r in caller.requests]
    assert stages == [("planner", 1, ""), ("planner", 1, ""), ("coder", 2, "planner")]
    assert all(0 < t <= 60.0 for t in caller.timeouts_s)


async def test_a_call_past_its_programs_deadline_is_not_sent():
    import time

    import grpc

    caller = _FailingOnce()
    program = client_module.Program(caller, "code", 2, {"deadline_unix_s": time.time() - 1.0})
    with pytest.raises(grpc.aio.AioRpcError) as late:
        await program.complete("planner", [("user", "plan")], 8)
    assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED and caller.requests == []


async def test_a_call_carries_the_timeout_it_was_sent_with_only_once_the_channel_is_connected():
    """A fresh channel's first call waits for it to connect; had it said its timeout, the balancer would
    read the connecting as a wait to be taken (``hetflow.runtime.accept_wait``)."""
    import grpc

    from hetflow.runtime.accept_wait import SENT_TIMEOUT_KEY
    from hetflow.runtime.channels import SERVER_OPTIONS
    from hetflow.v1 import balancer_pb2_grpc

    seen: list[bool] = []

    class Balancer(balancer_pb2_grpc.BalancerServicer):
        async def Complete(self, request, context):
            seen.append(any(key == SENT_TIMEOUT_KEY for key, _ in context.invocation_metadata()))
            return balancer_pb2.CompletionReply(request_id=request.request_id)

    server = grpc.aio.server(options=SERVER_OPTIONS)  # the client's keepalive pings never close the connection
    balancer_pb2_grpc.add_BalancerServicer_to_server(Balancer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with HetflowClient(f"127.0.0.1:{port}") as client:
            for _ in range(2):
                await client.complete(build_request(prompt="hi", max_tokens=2), timeout_s=30.0)
            await client.complete(build_request(prompt="hi", max_tokens=2))
    finally:
        await server.stop(None)
    assert seen == [False, True, False]  # connecting; connected; no timeout to say
