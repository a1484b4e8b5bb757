"""Kairos 6's held calls in one queue: by priority, then by when held."""

from hetflow.core.hold_queue import HoldQueue
from hetflow.core.policies.contracts import Priority


def test_a_round_tries_the_held_calls_by_priority_then_by_when_held():
    q = HoldQueue()
    q.hold("late-urgent", Priority(1.0), now_s=5.0)
    q.hold("early-lax", Priority(9.0), now_s=1.0)
    q.hold("tie-later", Priority(9.0), now_s=2.0)
    q.hold("two-part", Priority(1.0, 0.5), now_s=6.0)
    assert [h.request_id for h in q.in_order()] == ["late-urgent", "two-part", "early-lax", "tie-later"]
    q.release("late-urgent")
    assert [h.request_id for h in q.in_order()][0] == "two-part" and len(q) == 3


def test_a_call_held_again_keeps_its_place_and_when_it_was_first_held():
    q = HoldQueue()
    first = q.hold("x", Priority(3.0), now_s=1.0)
    assert q.hold("x", Priority(0.0), now_s=9.0) is first and first.held_since_s == 1.0
    assert "x" in q and q.release("nope") is None


def test_a_new_call_waits_with_the_held_ones_and_a_held_call_is_counted_once():
    q = HoldQueue()
    assert q.waiting_with("new") == 1
    q.hold("a", Priority(1.0), now_s=1.0)
    q.hold("b", Priority(1.0), now_s=2.0)
    assert q.waiting_with("new") == 3 and q.waiting_with("a") == 2
