"""The Router servicer's bounds on one request."""

import asyncio

import pytest

from hetflow.core.errors import InvalidArgument
from hetflow.v1 import router_pb2
from router_svc.servicer import MAX_PROMPTS, RouterServicer


class CountingCollector:
    """Answers every prompt at once and counts what reached it."""

    def __init__(self) -> None:
        self.prompts = 0

    async def submit(self, prompts):
        self.prompts += len(prompts)
        return [({"m": 0.5}, False) for _ in prompts]


def test_a_request_past_the_prompt_bound_is_invalid_and_queues_nothing():
    collector = CountingCollector()
    servicer = RouterServicer("test", ("m",), collector)  # type: ignore[arg-type]
    whole = asyncio.run(servicer.Score(router_pb2.ScoreRequest(prompts=["p"] * MAX_PROMPTS), None))
    assert len(whole.scores) == MAX_PROMPTS
    with pytest.raises(InvalidArgument, match="at most"):
        asyncio.run(servicer.Score(router_pb2.ScoreRequest(prompts=["p"] * (MAX_PROMPTS + 1)), None))
    assert collector.prompts == MAX_PROMPTS
