"""The decision loop on handmade calls and a stub clock: holds, rounds, releases, limits, and a call whose
engine dies while it is held."""

from dataclasses import replace

import pytest

from hetflow.core.decision_loop import DecisionLoop, Gathered, HoldLimits
from hetflow.core.errors import DeadlineExceeded, ResourceExhausted, Unavailable
from hetflow.core.pipeline import Pipeline
from hetflow.core.policies.contracts import Prediction, WaitForCapacity
from hetflow.core.policy_config import PolicyConfig, StageConfig
from tests.factories import call, engine, snapshot

MAX_CAPACITY_FCFS = PolicyConfig(model=StageConfig("least-load"), engine=StageConfig("max-capacity"),
                                 priority=StageConfig("fcfs"), retention=StageConfig("free-at-finish"),
                                 reserve=StageConfig("no-reserve"))


def kv_engine(engine_id: str, free_tokens: int, healthy: bool = True):
    return replace(engine(engine_id, "m", healthy=healthy), kv_capacity_tokens=10_000,
                   kv_cache_usage=1.0 - free_tokens / 10_000)


def gathered(loop: DecisionLoop, the_call, *engines, output_tokens: float = 500.0) -> Gathered:
    view = snapshot(*engines)
    candidates, router_asked = loop.candidates(the_call, view)
    return Gathered(the_call, view, candidates, router_asked, {},
                    {m: (Prediction(output_tokens), "") for m in candidates})


def test_a_call_without_room_is_held_and_placed_by_a_later_round_once_room_frees():
    loop = DecisionLoop(Pipeline(MAX_CAPACITY_FCFS), HoldLimits())
    the_call = call(input_tokens=1000, max_tokens=8192)
    with pytest.raises(WaitForCapacity) as wait:
        loop.decide(gathered(loop, the_call, kv_engine("a", 1200)))
    assert loop.hold(the_call, wait.value, now_unix_s=10.0) == float("inf")
    assert [h.request_id for h in loop.round()] == [the_call.request_id]
    assert loop.pipeline.store.waiting_calls == 1 and not loop.pipeline.store.call_is_held   # a new call
    decision = loop.decide(gathered(loop, the_call, kv_engine("a", 5000)))                 # the next round
    assert decision.engine_id == "a" and loop.pipeline.store.call_is_held
    assert loop.leave(the_call.request_id) == 10.0 and not loop.held and loop.leave(the_call.request_id) is None


def test_a_round_decides_the_held_calls_in_priority_order_and_a_call_held_again_keeps_its_place():
    shortest_first = replace(MAX_CAPACITY_FCFS, priority=StageConfig("predicted-total-tokens"))
    loop = DecisionLoop(Pipeline(shortest_first), HoldLimits())
    longest, shortest, middle = (call(input_tokens=1000, max_tokens=8192) for _ in range(3))
    for now_s, (held, tokens) in enumerate(((longest, 700.0), (shortest, 300.0), (middle, 500.0))):
        with pytest.raises(WaitForCapacity) as wait:
            loop.decide(gathered(loop, held, kv_engine("a", 1200), output_tokens=tokens))
        loop.hold(held, wait.value, now_unix_s=float(now_s))
    assert [h.request_id for h in loop.round()] == [shortest.request_id, middle.request_id, longest.request_id]
    with pytest.raises(WaitForCapacity) as wait:
        loop.decide(gathered(loop, longest, kv_engine("a", 1200), output_tokens=700.0))
    loop.hold(longest, wait.value, now_unix_s=9.0)               # held again: its first hold's time stays
    assert loop.held.held_since_s(longest.request_id) == 0.0 and len(loop.held) == 3


def test_the_limits_refuse_a_call_past_the_hold_queues_room_or_its_deadline_and_bound_its_wait():
    loop = DecisionLoop(Pipeline(MAX_CAPACITY_FCFS), HoldLimits(max_held_calls=1, max_hold_s=30.0,
                                                                 refuse_past_deadline=True))
    wait = WaitForCapacity("no room", retry_after_s=1.0)
    first = call(deadline_unix_s=112.0)
    assert loop.hold(first, wait, now_unix_s=100.0) == 12.0                       # its deadline comes first
    assert loop.hold(first, wait, now_unix_s=101.0) == 11.0                       # held again: not refused
    with pytest.raises(ResourceExhausted, match="max_held_calls") as full:
        loop.hold(call(), wait, now_unix_s=101.0)
    assert full.value.retry_after_s == 1.0
    loop.leave(first.request_id)
    with pytest.raises(DeadlineExceeded, match="deadline passed"):
        loop.hold(call(deadline_unix_s=100.5), wait, now_unix_s=100.0)
    assert loop.hold(call(), wait, now_unix_s=100.0) == 30.0


def test_a_held_call_whose_engine_died_goes_to_one_with_room_or_fails_when_none_serves():
    loop = DecisionLoop(Pipeline(MAX_CAPACITY_FCFS), HoldLimits())
    the_call = call(input_tokens=1000, max_tokens=8192)
    with pytest.raises(WaitForCapacity) as wait:
        loop.decide(gathered(loop, the_call, kv_engine("a", 1200), kv_engine("b", 1200)))
    loop.hold(the_call, wait.value, now_unix_s=0.0)
    decision = loop.decide(gathered(loop, the_call, kv_engine("a", 9000, healthy=False), kv_engine("b", 5000)))
    assert decision.engine_id == "b"
    with pytest.raises(Unavailable):
        loop.decide(gathered(loop, the_call, kv_engine("a", 9000, healthy=False), kv_engine("b", 9000, healthy=False)))
    assert the_call.request_id in loop.held                                       # the caller decides its end
