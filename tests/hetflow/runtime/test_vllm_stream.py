"""Reading vLLM's SSE stream (the vllm-server backend and a held call's caller): events batched per network read."""

from __future__ import annotations

import json

import pytest

from hetflow.core.errors import Unavailable
from hetflow.runtime.vllm_stream import completion_event, event_batches


def _sse(event: dict | str) -> bytes:
    return f"data: {event if isinstance(event, str) else json.dumps(event)}\n\n".encode()


async def _reads(*parts: bytes):
    for part in parts:
        yield part


async def _batches(*parts: bytes) -> list[list[dict]]:
    return [batch async for batch in event_batches(_reads(*parts))]


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


def test_an_event_carries_the_counts_so_far_and_the_closing_usage_event_is_none():
    event = {"choices": [{"text": "hi", "finish_reason": None}], "usage": {"completion_tokens": 4, "prompt_tokens": 9}}
    parsed = completion_event(event, output_tokens=3, prompt_tokens=0)
    assert (parsed.text, parsed.output_tokens, parsed.prompt_tokens, parsed.finish_reason) == ("hi", 4, 9, "")
    without_usage = completion_event({"choices": [{"text": "!", "finish_reason": "stop"}]}, 4, 9)
    assert (without_usage.output_tokens, without_usage.prompt_tokens, without_usage.finish_reason) == (5, 9, "stop")
    assert completion_event({"choices": [], "usage": {"completion_tokens": 5}}, 5, 9) is None
