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


@pytest.mark.parametrize("event", ["{not json", '["a list"]', json.dumps({"error": "a bare string"})])
async def test_an_event_not_as_vllms_ends_the_stream_unavailable(event):
    with pytest.raises(Unavailable):
        await _batches(_sse(event))


def test_counts_not_as_vllms_are_the_servers_fault():
    with pytest.raises(Unavailable, match="not as vLLM's"):
        completion_event({"choices": [{"text": "x"}], "usage": {"completion_tokens": None}}, 0, 3)


@pytest.mark.parametrize("status, caller_s", [(400, True), (413, True), (422, True), (401, False), (403, False),
                                               (404, False), (408, False), (429, False), (500, False)])
def test_only_a_request_the_server_calls_wrong_is_the_callers_fault(status, caller_s):
    from hetflow.core.errors import InvalidArgument
    from hetflow.runtime.vllm_stream import server_error

    error = server_error(status, b'{"error": {"message": "m"}}')
    assert isinstance(error, InvalidArgument if caller_s else Unavailable)
