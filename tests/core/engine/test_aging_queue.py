"""The queue key (starvation_level, priority, arrival) and Chimera 3.7 aging."""

import pytest

from hetflow.core.engine.aging_queue import AgingPriorityQueue
from hetflow.core.engine.request import PROMOTED_LEVEL, RequestStatus
from tests.factories import request


def test_pops_in_priority_then_arrival_order():
    q = AgingPriorityQueue(starvation_threshold=100, running_quantum=10)
    a, b, c, d = (request(priority=p, arrival_s=t) for p, t in [(5, 0), (1, 1), (5, -1), (1, 2)])
    for r in (a, b, c, d):
        q.push(r, iteration=0)
    assert [q.pop() for _ in range(4)] == [b, d, c, a]


def test_a_request_is_promoted_once_passed_over_s_iterations_not_s_minus_1():
    """Chimera 3.7: starvation_count counts the iterations a request was not selected; promotion at
    count >= S. Queued before iteration 1 with S = 3, it is passed over by iterations 1, 2 and 3 and
    sorts first from iteration 4 on."""
    q = AgingPriorityQueue(starvation_threshold=3, running_quantum=10)
    long = request(priority=1000)
    q.push(long, iteration=0)
    for iteration in (1, 2, 3):
        q.age(iteration)
        q.push(short := request(priority=1), iteration)
        assert q.pop() is short and long.starvation_level == 0    # passed over in this iteration
    q.age(4)
    assert long.starvation_level == PROMOTED_LEVEL and q.peek() is long


def test_long_request_behind_steady_stream_of_short_ones_is_served_within_s_plus_q():
    """Chimera 3.7: one short request arrives and one is served per iteration; the long one must not starve."""
    S, Q = 20, 5
    q = AgingPriorityQueue(starvation_threshold=S, running_quantum=Q)
    long = request(priority=10_000)
    q.push(long, iteration=0)
    served_at = None
    for iteration in range(1, 10 * S):
        q.push(request(priority=1), iteration)
        q.age(iteration)
        if q.pop() is long:
            served_at = iteration
            break
    assert served_at is not None and served_at <= S + Q


def test_without_aging_pressure_long_request_waits():
    """The same stream with a huge S: the long request is never chosen (the test above is not vacuous)."""
    q = AgingPriorityQueue(starvation_threshold=10_000, running_quantum=5)
    long = request(priority=10_000)
    q.push(long, iteration=0)
    for iteration in range(1, 200):
        q.push(request(priority=1), iteration)
        q.age(iteration)
        assert q.pop() is not long


def test_promoted_request_is_demoted_after_running_quantum():
    q = AgingPriorityQueue(starvation_threshold=1, running_quantum=3)
    r = request()
    q.push(r, 0)
    q.age(2)
    assert q.pop() is r and r.starvation_level == PROMOTED_LEVEL
    r.status = RequestStatus.RUNNING
    for _ in range(2):
        q.note_running_iteration(r)
    assert r.starvation_level == PROMOTED_LEVEL
    q.note_running_iteration(r)
    assert r.starvation_level == 0


def test_remove_skips_entry_and_repush_resets_the_count():
    q = AgingPriorityQueue(starvation_threshold=2, running_quantum=1)
    a, b = request(priority=1), request(priority=2)
    q.push(a, 0)
    q.push(b, 0)
    assert q.remove(a.request_id) is a
    assert len(q) == 1 and q.peek() is b
    q.pop()
    q.push(b, 5)       # re-queued (e.g. preempted) after iteration 5
    q.age(7)           # passed over by iteration 6 only
    assert b.starvation_level == 0
    q.age(8)           # ... and by 7: S = 2
    assert b.starvation_level == PROMOTED_LEVEL


def test_rejects_nonpositive_parameters():
    with pytest.raises(ValueError):
        AgingPriorityQueue(0, 1)
