"""The vllm-server backend sends a request again when its connection fails before any token (a pooled
keep-alive connection the server closed as it was reused), and only then."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from engine_svc.backends.base import GenerateCall
from engine_svc.backends.vllm_metrics import VllmServerLoad
from engine_svc.backends.vllm_server import VllmServerBackend
from engine_svc.config import VllmServerConfig
from hetflow.core.call import SamplingSpec
from hetflow.core.engine.aging_queue import AgingPriorityQueue
from hetflow.core.errors import Unavailable

DONE = json.dumps({"choices": [{"text": "hi", "finish_reason": "length"}],
                   "usage": {"prompt_tokens": 3, "completion_tokens": 1}})


def _backend(retries: int, fail_first: int) -> tuple[VllmServerBackend, list[int]]:
    attempts: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        attempts.append(len(attempts))
        if len(attempts) <= fail_first:
            raise httpx.ReadError("the server closed the connection", request=request)
        return httpx.Response(200, content=f"data: {DONE}\n\ndata: [DONE]\n\n".encode())

    backend = VllmServerBackend("m", VllmServerConfig(base_url="http://vllm.test", connection_retries=retries),
                                AgingPriorityQueue(), "")
    backend._http = httpx.AsyncClient(base_url="http://vllm.test", transport=httpx.MockTransport(handler))
    backend._load = VllmServerLoad(num_gpu_blocks=64, block_size=16)  # as start() reads them from /metrics
    return backend, attempts


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
    backend, attempts = _backend(retries=1, fail_first=1)
    delta = await _first_delta(backend)
    assert delta.finished and delta.text == "hi" and len(attempts) == 2


async def test_past_its_retries_the_call_fails_unavailable():
    backend, attempts = _backend(retries=1, fail_first=2)
    with pytest.raises(Unavailable, match="ReadError"):
        await _first_delta(backend)
    assert len(attempts) == 2
