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
