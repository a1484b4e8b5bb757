"""Kairos 6's held calls in one queue: by priority, then by when held; per model the first tries."""

from hetflow.core.hold_queue import HoldQueue
from hetflow.core.policies import Priority


def test_the_first_of_each_model_is_the_best_placed_and_models_do_not_block_each_other():
    q = HoldQueue()
    q.hold("late-urgent", "a", Priority(1.0), now_s=5.0)
    q.hold("early-lax", "a", Priority(9.0), now_s=1.0)
    q.hold("other-model", "b", Priority(50.0), now_s=2.0)
    assert q.is_first("late-urgent") and not q.is_first("early-lax") and q.is_first("other-model")
    assert [h.request_id for h in q.in_order()] == ["late-urgent", "early-lax", "other-model"]
    q.release("late-urgent")
    assert q.is_first("early-lax") and len(q) == 2


def test_equal_priorities_go_in_the_order_they_were_held_and_a_call_held_again_keeps_its_place():
    q = HoldQueue()
    first = q.hold("x", "a", Priority(3.0, 7.0), now_s=1.0)
    q.hold("y", "a", Priority(3.0, 7.0), now_s=2.0)
    assert q.hold("x", "a", Priority(0.0), now_s=9.0) is first      # held again: same place, first held at 1 s
    assert q.is_first("x") and "y" in q and q.release("nope") is None
