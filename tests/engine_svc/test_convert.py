"""engine_svc's conversions: what the balancer sends is what the backend runs."""

import pytest

from balancer_svc.convert import engine_request
from engine_svc.convert import call_from_proto
from hetflow.core.errors import InvalidArgument
from hetflow.core.policies.contracts import Priority
from tests.factories import call


def test_the_balancer_s_engine_request_reaches_the_backend_with_its_retention_and_reserve():
    sent = engine_request(call(program_id="p", max_tokens=8), Priority(3.0, 1.5), retain_kv_s=4.5,
                          reserve_output_tokens=120)
    got = call_from_proto(sent, max_tokens_limit=64)
    assert (got.priority, got.priority_tiebreak, got.program_id, got.retain_kv_s, got.reserve_output_tokens) == \
        (3.0, 1.5, "p", 4.5, 120)


def test_a_negative_retention_frees_at_once_and_an_empty_request_is_refused():
    sent = engine_request(call(max_tokens=8), Priority(0.0), retain_kv_s=-1.0)
    assert call_from_proto(sent, max_tokens_limit=64).retain_kv_s == 0.0
    sent.request_id = ""
    with pytest.raises(InvalidArgument, match="request_id"):
        call_from_proto(sent, max_tokens_limit=64)


def test_a_chat_of_empty_messages_reaches_the_backend_and_a_call_with_neither_prompt_nor_messages_does_not():
    sent = engine_request(call(max_tokens=8), Priority(0.0))
    sent.prompt = ""
    del sent.messages[:]
    with pytest.raises(InvalidArgument, match="non-empty"):
        call_from_proto(sent, max_tokens_limit=64)
    sent.messages.add(role="user", content="")
    assert call_from_proto(sent, max_tokens_limit=64).messages == (("user", ""),)


@pytest.mark.parametrize("hold_s", [float("inf"), float("nan")])
def test_a_hold_that_is_not_a_finite_time_is_an_invalid_argument(hold_s):
    with pytest.raises(InvalidArgument, match="retain_kv_s"):
        call_from_proto(engine_request(call(max_tokens=8), Priority(0.0), retain_kv_s=hold_s), max_tokens_limit=64)
