"""A response ends once, however it ends: one whose call could not even be opened too (the gateway counts
its calls in flight by these ends)."""

import asyncio
import time

import pytest

from gateway_svc.responses import CallResponse
from hetflow.runtime.openai_request import parse


def test_a_call_that_cannot_be_opened_ends_its_response():
    ended = []

    def open_call(request, metadata):
        raise RuntimeError("the decision stream could not be built")

    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    parsed = parse("chat", body, {}, 16, "", frozenset({"m"}))
    response = CallResponse(open_call, parsed, time.perf_counter(), on_end=lambda: ended.append(True))

    async def receive():
        return {"type": "http.disconnect"}

    async def send(message):
        pass

    with pytest.raises(RuntimeError, match="could not be built"):
        asyncio.run(response({"type": "http"}, receive, send))
    assert ended == [True]
