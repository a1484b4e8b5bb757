"""The vllm-server backend's reading of vLLM's SSE stream: events batched per network read."""

from __future__ import annotations

import json

import pytest

from engine_svc.backends.vllm_server import _event_batches
from hetflow.core.errors import Unavailable


def _sse(event: dict | str) -> bytes:
    return f"data: {event if isinstance(event, str) else json.dumps(event)}\n\n".encode()


async def _reads(*parts: bytes):
    for part in parts:
        yield part


async def _batches(*parts: bytes) -> list[list[dict]]:
    return [batch async for batch in _event_batches(_reads(*parts))]


async def test_events_that_arrive_together_are_one_batch():
    a, b, c = ({"choices": [{"text": t}]} for t in "abc")
    assert await _batches(_sse(a) + _sse(b), _sse(c)) == [[a, b], [c]]


async def test_an_event_split_across_reads_is_parsed_once_whole():
    event = _sse({"choices": [{"text": "hello"}], "usage": {"completion_tokens": 3}})
    assert await _batches(event[:9], event[9:20], event[20:]) == [[json.loads(event[6:])]]


async def test_done_and_comments_are_not_events():
    a = {"choices": [{"text": "x"}]}
    assert await _batches(b": keep-alive\n\n" + _sse(a) + _sse("[DONE]")) == [[a]]


async def test_an_error_event_ends_the_stream_unavailable():
    with pytest.raises(Unavailable, match="out of blocks"):
        await _batches(_sse({"error": {"message": "out of blocks"}}))
