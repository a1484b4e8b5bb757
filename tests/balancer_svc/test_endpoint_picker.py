"""The endpoint picker's refusals, on a dispatcher that refuses: each answered as the gateway answers it,
and the call forgotten whatever ends it."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from types import SimpleNamespace
from typing import Iterator

import pytest

from balancer_svc.config import BalancerConfig
from balancer_svc.endpoint_picker import EndpointPicker, Exchange
from hetflow.core.errors import NotFound, ResourceExhausted
from hetflow.runtime.security import SecurityConfig
from hetflow.runtime.server import ServeConfig

MODEL = "small"
KEY = "sk-team-a"
CHAT = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "Write a sort."}], "max_tokens": 8,
                   "hetflow": {"program_id": "p"}}).encode()


class RefusingDispatcher:
    """What the picker reads of a dispatcher; ``decide`` raises ``refusal`` after noting whether the call
    was marked as the gateway's."""

    def __init__(self, refusal: BaseException) -> None:
        keys = {hashlib.sha256(KEY.encode()).hexdigest(): "team-a"}
        self.cfg = BalancerConfig(serve=ServeConfig(security=SecurityConfig(api_keys=keys)))
        self.count_prompt = None
        self.gateway_calls: set[str] = set()
        self.monitor_view = SimpleNamespace(limit_endpoints=lambda request_id, subset: None)
        self.refusal, self.marked = refusal, False

    @contextlib.contextmanager
    def admission(self, tenant: str, relays: bool = True) -> Iterator[None]:
        yield

    async def decide(self, call) -> None:
        self.marked = call.request_id in self.gateway_calls
        raise self.refusal


def exchange() -> Exchange:
    return Exchange(headers={"authorization": f"Bearer {KEY}", ":path": "/v1/chat/completions"}, body=bytearray(CHAT))


@pytest.mark.parametrize("refusal, status, kind, retry_after", [
    (ResourceExhausted("the tenant's queue is full", retry_after_s=2.5), 429, "rate_limit_error", "3"),
    (NotFound("no engine serves small"), 404, "not_found_error", None),
])
async def test_a_refused_tenant_call_is_answered_as_the_gateway_answers_it_and_forgotten(refusal, status, kind,
                                                                                       retry_after):
    dispatcher = RefusingDispatcher(refusal)
    (reply,) = await EndpointPicker(dispatcher, MODEL)._decided(exchange())
    answer = reply.immediate_response
    headers = {h.header.key: h.header.raw_value.decode() for h in answer.headers.set_headers}
    assert (answer.status.code, json.loads(answer.body)["error"]["type"]) == (status, kind)
    assert headers.get("retry-after") == retry_after
    assert dispatcher.marked and dispatcher.gateway_calls == set()


async def test_a_call_whose_stream_is_dropped_while_it_waits_is_forgotten():
    dispatcher = RefusingDispatcher(asyncio.CancelledError())
    with pytest.raises(asyncio.CancelledError):
        await EndpointPicker(dispatcher, MODEL)._decided(exchange())
    assert dispatcher.marked and dispatcher.gateway_calls == set()
