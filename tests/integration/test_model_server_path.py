"""Calls streamed from an engine's model server itself (issue 34, ``Engine.Hold``): a ``vllm-server``
engine in front of a simulated vLLM server queues each call, grants its turn, and is told how it ended,
so no hetflow process relays the tokens; the monitor's entries end as on the direct path; a caller that
goes away frees the slot and closes the server's stream; an engine with no model server is streamed from
as before; the gateway takes this path for an OpenAI client."""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator

import grpc
import openai
import pytest
import uvicorn

from engine_svc.vllm_sim.app import build
from engine_svc.vllm_sim.config import VllmSimConfig
from engine_svc.vllm_sim.tokenizer import PromptTokenizer
from hetflow.client import build_request
from hetflow.runtime.direct_call import DirectCall
from hetflow.runtime.http1 import Http1Client, HttpConnectError, _Connection, split_url
from hetflow.runtime.interceptors import RPC_HANDLED
from hetflow.runtime.ports import free_port
from hetflow.v1 import balancer_pb2_grpc, engine_pb2, engine_pb2_grpc
from tests.factories import wait_until
from tests.integration.harness import SMALL, Stack, serving_gateway, stack_config, start_stack, wait_until_idle

pytestmark = pytest.mark.slow


@pytest.fixture
async def model_server() -> AsyncIterator[Any]:
    server, app = build(VllmSimConfig("sim-0", profile=f"{SMALL}@a6000"), PromptTokenizer())
    port = free_port()
    uv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, loop="none", log_config=None, lifespan="on"))
    task = asyncio.create_task(uv.serve())

    async def started() -> bool:
        return bool(uv.started)

    await wait_until(started)
    server.url = f"http://127.0.0.1:{port}"
    yield server
    uv.should_exit = True
    await task


async def _stack(engine: dict[str, Any]) -> Stack:
    raw = stack_config([{"name": "engine-0", "profile": f"{SMALL}@a6000", **engine}])
    raw["router"]["models"] = {SMALL: 0.5}
    return await start_stack(raw)


@pytest.fixture
async def served(model_server) -> AsyncIterator[Stack]:
    stack = await _stack({"backend": "vllm-server", "vllm_server": {"base_url": model_server.url, "max_num_seqs": 2,
                                                                     "metrics_interval_s": 0.1}})
    yield stack
    await stack.close()


class Caller:
    """As the gateway calls: decisions from the balancer, held calls streamed from the model server."""

    def __init__(self, stack: Stack) -> None:
        self.balancer_channel = grpc.aio.insecure_channel(stack.address("balancer"))
        self.engine_channels: dict[str, grpc.aio.Channel] = {}
        self.http = Http1Client(read_timeout_s=None)
        self.model_server_less: set[str] = set()

    def engine_at(self, address: str) -> engine_pb2_grpc.EngineStub:
        if address not in self.engine_channels:
            self.engine_channels[address] = grpc.aio.insecure_channel(address)
        return engine_pb2_grpc.EngineStub(self.engine_channels[address])

    def call(self, request_id: str, max_tokens: int) -> DirectCall:
        request = build_request(prompt=f"Write function {request_id}.", max_tokens=max_tokens, ignore_eos=True,
                                program_id="held-p", workflow="code", agent="coder", request_id=request_id,
                                want_receipt=True)
        return DirectCall(balancer_pb2_grpc.BalancerStub(self.balancer_channel), self.engine_at, request,
                          timeout_s=30, model_server=self.http, model_server_less=self.model_server_less)

    async def close(self) -> None:
        await self.http.aclose()
        for channel in [self.balancer_channel, *self.engine_channels.values()]:
            await channel.close()


def _finished(model_server: Any) -> float:
    """Calls the server finished (it counts none it aborted, as vLLM does)."""
    return sum(counter._value.get() for counter in model_server.metrics.success.values())


def _rpcs(method: str, code: str = "OK") -> float:
    return RPC_HANDLED.labels("engine-0", method, code)._value.get()


async def test_held_calls_stream_from_the_model_server_and_the_engine_ends_their_entries(served, model_server,
                                                                                         monkeypatch):
    link = served.engine_servicers["engine-0"].monitor
    ended = link.ended

    async def slow_ended(*args):  # a release sent after the last chunk would still be on its way
        await asyncio.sleep(0.2)
        await ended(*args)
    monkeypatch.setattr(link, "ended", slow_ended)
    caller, holds, generates = Caller(served), _rpcs("Hold"), _rpcs("Generate")
    calls, in_flight_at_last_chunk = [], []
    try:
        for i in range(3):
            call, chunks = caller.call(f"held-{i}", 7), []
            while (chunk := await call.read()) is not grpc.aio.EOF:
                chunks.append(chunk)
                if chunk.finished:  # as the gateway does: the last chunk goes to the client at once
                    in_flight_at_last_chunk.append(sum(e.in_flight_requests for e in (await served.snapshot()).engines))
            calls.append(chunks)
    finally:
        await caller.close()
    assert in_flight_at_last_chunk == [0, 0, 0]  # the monitor heard of each end before its last chunk came
    for chunks in calls:
        first, last = chunks[0], chunks[-1]
        assert first.engine_id == "engine-0" and first.model == SMALL and first.receipt.engine_id == "engine-0"
        assert last.finished and last.finish_reason == "length" and last.output_tokens == 7
        assert last.usage.output_tokens == 7 and last.usage.prompt_tokens > 0
        assert "".join(c.text for c in chunks)  # the server's text, as it streamed it
    assert (_rpcs("Hold") - holds, _rpcs("Generate") - generates) == (3, 0)  # no token went through hetflow
    snap = await wait_until_idle(served)
    assert all(e.in_flight_requests == 0 for e in snap.engines)
    backend = served.engine_servicers["engine-0"].backend
    assert backend.status().running == 0 and not backend._held


async def test_a_held_call_whose_caller_goes_away_frees_its_slot_and_closes_the_servers_stream(served, model_server):
    caller, finished = Caller(served), _finished(model_server)
    backend = served.engine_servicers["engine-0"].backend
    try:
        call = caller.call("held-gone", 1500)
        async for chunk in call:
            if chunk.output_tokens >= 2:
                break
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call.read()

        async def freed() -> bool:
            return (backend.status().running == 0 and model_server.backend.status().running == 0
                    and "held-gone" not in backend.status().active_request_ids)

        await wait_until(freed)
        assert _finished(model_server) == finished  # the server aborted it: its stream was closed
        snap = await wait_until_idle(served)
        assert all(e.in_flight_requests == 0 for e in snap.engines)
        after = [chunk async for chunk in caller.call("held-next", 3)]  # the slot serves the next call
        assert after[-1].finished and after[-1].output_tokens == 3
    finally:
        await caller.close()


async def test_an_engine_with_no_model_server_is_streamed_from_itself_and_not_asked_again():
    stack = await _stack({})
    caller, holds, generates = Caller(stack), _rpcs("Hold", "UNIMPLEMENTED"), _rpcs("Generate")
    try:
        calls = [[chunk async for chunk in caller.call(f"sim-{i}", 4)] for i in range(2)]
    finally:
        await caller.close()
        await stack.close()
    assert all(chunks[-1].finished and chunks[-1].output_tokens == 4 for chunks in calls)
    assert caller.model_server_less == {stack.address("engine-0")}
    assert (_rpcs("Generate") - generates, _rpcs("Hold", "UNIMPLEMENTED") - holds) == (2, 1)  # asked once


async def test_the_gateway_streams_a_vllm_server_engines_calls_from_the_server_and_a_closed_stream_frees_it(
        served, model_server):
    served.raw["gateway"] = {"port": free_port()}
    backend = served.engine_servicers["engine-0"].backend
    holds, generates, finished = _rpcs("Hold"), _rpcs("Generate"), _finished(model_server)
    async with serving_gateway(served.raw) as base_url:
        async with openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
            reply = await client.chat.completions.create(
                model="hetflow", messages=[{"role": "user", "content": "hi"}], max_tokens=5,
                extra_body={"ignore_eos": True})
            assert reply.usage.completion_tokens == 5 and reply.choices[0].message.content
            assert reply.choices[0].finish_reason == "length"
            stream = await client.chat.completions.create(
                model="hetflow", messages=[{"role": "user", "content": "go on"}], max_tokens=1500, stream=True,
                extra_body={"ignore_eos": True})
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    break
            await stream.close()

            async def freed() -> bool:
                return backend.status().running == 0 and model_server.backend.status().running == 0

            await wait_until(freed)
    assert (_rpcs("Hold") - holds, _rpcs("Generate") - generates) == (2, 0)
    assert _finished(model_server) == finished + 1  # the second aborted when the gateway closed its stream
    snap = await wait_until_idle(served)
    assert all(e.in_flight_requests == 0 for e in snap.engines)


async def test_a_chat_of_empty_messages_is_served_through_the_gateway_as_vllm_serves_it(served):
    """A first ShareGPT question shorter than the chat template's own tokens reaches the server as an
    empty message; vLLM renders and serves it, and so does every hetflow service on the way."""
    served.raw["gateway"] = {"port": free_port()}
    async with serving_gateway(served.raw) as base_url:
        async with openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
            reply = await client.chat.completions.create(
                model="hetflow", messages=[{"role": "system", "content": ""}, {"role": "user", "content": ""}],
                max_tokens=3, extra_body={"ignore_eos": True})
    assert reply.usage.completion_tokens == 3 and reply.usage.prompt_tokens > 0


async def test_a_hold_that_does_not_start_with_its_request_or_carries_a_forged_ticket_gets_a_clear_status(served):
    async def status(*messages: engine_pb2.HoldMessage) -> grpc.StatusCode:
        async with grpc.aio.insecure_channel(served.address("engine-0")) as channel:
            hold = engine_pb2_grpc.EngineStub(channel).Hold(iter(messages), timeout=10)
            try:
                async for _ in hold:
                    pass
            except grpc.aio.AioRpcError as exc:
                return exc.code()
        return grpc.StatusCode.OK

    assert await status(engine_pb2.HoldMessage(end=engine_pb2.HoldEnd())) == grpc.StatusCode.INVALID_ARGUMENT
    assert await status() == grpc.StatusCode.INVALID_ARGUMENT
    forged = engine_pb2.EngineGenerateRequest(request_id="forged", prompt="hi")
    forged.ticket.claims, forged.ticket.mac = b"\x0a\x06forged", b"not a mac"
    assert await status(engine_pb2.HoldMessage(request=forged)) == grpc.StatusCode.PERMISSION_DENIED
    backend = served.engine_servicers["engine-0"].backend
    assert backend.status().running == 0 and not backend._held


async def test_a_model_server_the_caller_cannot_reach_is_streamed_through_its_engine(served):
    class NoRoute(Http1Client):
        async def _connect(self, origin):
            raise HttpConnectError(f"no connection to {origin.host}:{origin.port}: no route to host")

    caller, generates = Caller(served), _rpcs("Generate")
    await caller.http.aclose()
    caller.http = NoRoute(read_timeout_s=None)
    try:
        chunks = [chunk async for chunk in caller.call("held-unreachable", 5)]
        again = [chunk async for chunk in caller.call("held-unreachable-2", 5)]
    finally:
        await caller.close()
    assert chunks[-1].finished and chunks[-1].output_tokens == 5 and again[-1].output_tokens == 5
    assert caller.model_server_less == {served.address("engine-0")} and _rpcs("Generate") - generates == 2
    backend = served.engine_servicers["engine-0"].backend
    assert backend.status().running == 0 and not backend._held


async def test_a_pooled_connection_the_server_had_closed_is_sent_once_more_not_decided_again(served, model_server):
    async def close_unanswered(reader, writer) -> None:
        resets.append(await reader.readuntil(b"\r\n\r\n"))
        writer.close()

    resets: list[bytes] = []
    closing = await asyncio.start_server(close_unanswered, "127.0.0.1", 0)
    stale = _Connection(*await asyncio.open_connection("127.0.0.1", closing.sockets[0].getsockname()[1]))
    caller, holds, generates = Caller(served), _rpcs("Hold"), _rpcs("Generate")
    stale.idle_since_s = time.monotonic()
    caller.http._idle[split_url(model_server.url)[0]] = [stale]  # kept alive, and closed by its server when used
    try:
        chunks = [chunk async for chunk in caller.call("held-reset", 4)]
    finally:
        await caller.close()
        closing.close()
    assert resets and chunks[-1].finished and chunks[-1].output_tokens == 4
    assert (_rpcs("Hold") - holds, _rpcs("Generate") - generates) == (1, 0) and not caller.model_server_less
