"""The balancer as a standard endpoint picker (issue 34), driven by a protocol-level client that speaks
as a gateway does under the Gateway API Inference Extension's endpoint-picker protocol v1.0.0: request
headers and body in over Envoy's ext_proc, the destination header and metadata out, the subset hint,
the immediate responses, and the response streaming back through to release the call."""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator

import grpc
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc_grpc
from google.protobuf import struct_pb2

from hetflow.v1 import monitor_pb2, monitor_pb2_grpc
from tests.integration.harness import SMALL, Stack, stack_config, start_stack, wait_until_idle

pytestmark = pytest.mark.slow
ENDPOINTS = {"small-0": "10.0.0.1:8000", "small-1": "10.0.0.2:8000"}


@pytest.fixture(scope="module")
async def stack() -> AsyncIterator[Stack]:
    raw = stack_config([{"name": name, "profile": f"{SMALL}@a6000", "serving_endpoint": endpoint}
                        for name, endpoint in ENDPOINTS.items()], endpoint_picker_model=SMALL)
    raw["monitor"]["orphan_grace_s"] = 0.0  # an entry its engine does not report is an orphan at once
    running = await start_stack(raw)
    yield running
    await running.close()


def _headers(end_of_stream: bool = False, subset: list[str] | None = None, **extra: str) -> ext_proc.ProcessingRequest:
    pairs = {":method": "POST" if not end_of_stream else "GET", ":path": "/v1/chat/completions", **extra}
    values = [base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in pairs.items()]
    msg = ext_proc.ProcessingRequest(request_headers=ext_proc.HttpHeaders(
        headers=base_pb2.HeaderMap(headers=values), end_of_stream=end_of_stream))
    if subset is not None:
        hint = struct_pb2.Struct()
        hint.update({"x-gateway-destination-endpoint-subset": subset})
        msg.metadata_context.filter_metadata["envoy.lb.subset_hint"].CopyFrom(hint)
    return msg


def _body(data: bytes, end_of_stream: bool) -> ext_proc.ProcessingRequest:
    return ext_proc.ProcessingRequest(request_body=ext_proc.HttpBody(body=data, end_of_stream=end_of_stream))


CHAT = json.dumps({"model": SMALL, "messages": [{"role": "user", "content": "Write a sort."}], "max_tokens": 8,
                   "hetflow": {"program_id": "epp-p", "agent": "coder"}}).encode()


class Gateway:
    """One HTTP request's ext_proc stream, as a gateway drives it."""

    def __init__(self, stack: Stack) -> None:
        self.channel = grpc.aio.insecure_channel(stack.address("balancer"))
        self.call = ext_proc_grpc.ExternalProcessorStub(self.channel).Process()

    async def send(self, *messages: ext_proc.ProcessingRequest, replies: int) -> list[ext_proc.ProcessingResponse]:
        for msg in messages:
            await self.call.write(msg)
        return [await asyncio.wait_for(self.call.read(), 10) for _ in range(replies)]

    async def close(self) -> None:
        await self.call.done_writing()
        await self.channel.close()


def _set(response: Any) -> dict[str, str]:
    return {h.header.key: h.header.raw_value.decode() for h in response.response.header_mutation.set_headers}


async def _in_flight(stack: Stack) -> int:
    return sum(e.in_flight_requests for e in (await stack.snapshot()).engines)


async def test_a_call_gets_its_destination_and_priority_and_is_released_when_its_response_ends(stack):
    gateway = Gateway(stack)
    assert await gateway.send(_headers(), _body(CHAT[:20], False), replies=0) == []  # headers wait for the body
    headers, body = await gateway.send(_body(CHAT[20:], True), replies=2)
    destination = _set(headers.request_headers)["x-gateway-destination-endpoint"]
    assert destination in ENDPOINTS.values()
    assert headers.dynamic_metadata["envoy.lb"]["x-gateway-destination-endpoint"] == destination  # the same value
    assert headers.request_headers.response.clear_route_cache
    sent = body.request_body.response.body_mutation.streamed_response
    assert sent.end_of_stream and int(_set(headers.request_headers)["content-length"]) == len(sent.body)
    rewritten = json.loads(sent.body)
    assert isinstance(rewritten["priority"], int) and rewritten["messages"] == json.loads(CHAT)["messages"]

    await asyncio.sleep(0.5)  # engine reports come and go: the entry is no orphan, the engine never sees the call
    assert await _in_flight(stack) == 1
    answer = [b'data: {"choices": [{"delta": {"content": "x"}}]}\n\n',
              b'data: {"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 7}}\n\ndata: [DONE]\n\n']
    chunks = [ext_proc.ProcessingRequest(response_body=ext_proc.HttpBody(body=c, end_of_stream=i == len(answer) - 1))
              for i, c in enumerate(answer)]
    replies = await gateway.send(ext_proc.ProcessingRequest(response_headers=ext_proc.HttpHeaders()), *chunks,
                                 replies=3)
    assert replies[0].WhichOneof("response") == "response_headers"
    assert [r.response_body.response.body_mutation.streamed_response.body for r in replies[1:]] == answer
    await gateway.close()
    await wait_until_idle(stack)
    async with grpc.aio.insecure_channel(stack.address("monitor")) as channel:
        program = await monitor_pb2_grpc.MonitorStub(channel).GetProgram(
            monitor_pb2.GetProgramRequest(program_id="epp-p"), timeout=2)
    assert (program.completed_requests, program.output_tokens) == (1, 7)


async def test_the_subset_hint_limits_the_choice_and_an_empty_one_is_503(stack):
    gateway = Gateway(stack)
    headers, _ = await gateway.send(_headers(subset=["10.0.0.2:8000"]), _body(CHAT, True), replies=2)
    assert _set(headers.request_headers)["x-gateway-destination-endpoint"] == "10.0.0.2:8000"
    await gateway.close()  # the stream ends before any response: the call is cancelled
    gateway = Gateway(stack)
    (refused,) = await gateway.send(_headers(subset=["10.9.9.9:1"]), _body(CHAT, True), replies=1)
    assert refused.immediate_response.status.code == 503
    await gateway.close()
    snap = await wait_until_idle(stack)
    assert all(e.in_flight_requests == 0 for e in snap.engines)


async def test_a_request_without_a_body_goes_to_a_ready_endpoint_and_a_bad_body_is_400(stack):
    gateway = Gateway(stack)
    (headers,) = await gateway.send(_headers(end_of_stream=True), replies=1)
    assert _set(headers.request_headers)["x-gateway-destination-endpoint"] in ENDPOINTS.values()
    await gateway.close()
    for bad in (b"{not json", json.dumps({"model": "another-model", "prompt": "hi"}).encode()):
        gateway = Gateway(stack)
        (refused,) = await gateway.send(_headers(), _body(bad, True), replies=1)
        assert refused.immediate_response.status.code in (400, 404)
        assert json.loads(refused.immediate_response.body)["error"]["message"]
        await gateway.close()
    assert await _in_flight(stack) == 0
