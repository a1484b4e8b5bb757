"""The vllm-server backend sends a request again when its connection fails before any token (a reset),
and only then."""

from __future__ import annotations

import asyncio
import json

import pytest

from engine_svc.backends.base import GenerateCall
from engine_svc.backends.vllm_metrics import VllmServerLoad
from engine_svc.backends.vllm_server import VllmServerBackend
from engine_svc.config import VllmServerConfig
from hetflow.core.call import SamplingSpec
from hetflow.core.engine.aging_queue import AgingPriorityQueue
from hetflow.core.errors import Unavailable
from tests.scripted_http import ScriptedServer

DONE = json.dumps({"choices": [{"text": "hi", "finish_reason": "length"}],
                   "usage": {"prompt_tokens": 3, "completion_tokens": 1}})


def _server(fail_first: int) -> ScriptedServer:
    """A server that closes the first ``fail_first`` connections on their request, unanswered."""
    async def handler(reader, writer, body) -> bool:
        if len(server.heads) <= fail_first:
            return False
        sse = f"data: {DONE}\n\ndata: [DONE]\n\n".encode()
        writer.write(f"HTTP/1.1 200 OK\r\ncontent-length: {len(sse)}\r\n\r\n".encode() + sse)
        await writer.drain()
        return True

    server = ScriptedServer(handler)
    return server


def _backend(server: ScriptedServer, retries: int) -> VllmServerBackend:
    backend = VllmServerBackend("m", VllmServerConfig(base_url=server.url, connection_retries=retries),
                                AgingPriorityQueue(), "")
    backend._load = VllmServerLoad(num_gpu_blocks=64, block_size=16)  # as start() reads them from /metrics
    return backend


async def _first_delta(backend: VllmServerBackend) -> object:
    async def abort(request_id: str) -> bool:
        return True

    stream = backend.front.serve(GenerateCall("r1", "hi", (), SamplingSpec(max_tokens=1), priority=1.0),
                                 [1, 2, 3], abort)
    first = asyncio.ensure_future(stream.__anext__())
    await asyncio.sleep(0)  # the call is queued
    req, token_ids, call = backend.front.waiting.pop("r1")
    await backend._run(req, token_ids, call)
    return await first


async def test_a_connection_failing_before_any_token_is_tried_again_and_the_call_completes():
    async with _server(fail_first=1) as server:
        delta = await _first_delta(_backend(server, retries=1))
    assert delta.finished and delta.text == "hi" and len(server.heads) == 2


async def test_past_its_retries_the_call_fails_unavailable():
    async with _server(fail_first=2) as server:
        with pytest.raises(Unavailable, match="HttpClosed"):
            await _first_delta(_backend(server, retries=1))
    assert len(server.heads) == 2
