"""MLFQ by attained service (FastServe's levels, quanta doubling), with Chimera 3.7 aging kept."""

import pytest

from hetflow.core.engine.aging_queue import AgingPriorityQueue
from hetflow.core.engine.mlfq_queue import MlfqQueue, mlfq_level
from hetflow.core.engine.queues import QueueConfig, make_queue
from hetflow.core.engine.request import PROMOTED_LEVEL, RequestStatus
from tests.factories import request


@pytest.mark.parametrize("attained, level", [(0, 0), (31, 0), (32, 1), (95, 1), (96, 2), (223, 2), (224, 3),
                                             (10**6, 7)])
def test_levels_end_after_quanta_that_double(attained, level):
    assert mlfq_level(attained, first_quantum_tokens=32, levels=8) == level


def test_a_request_that_has_run_long_is_demoted_behind_a_newcomer():
    q = MlfqQueue(starvation_threshold=1000, running_quantum=10, first_quantum_tokens=4, levels=4)
    veteran = request(priority=0, arrival_s=0.0)
    veteran.status = RequestStatus.RUNNING
    for produced in range(12):          # twelve decode iterations use up the first two quanta (4, then 8)
        q.note_running_iteration(veteran)
        veteran.output_tokens = produced + 1
    assert veteran.priority == 2
    newcomer = request(priority=500, arrival_s=5.0)   # the balancer's priority is not MLFQ's key
    q.push(veteran, iteration=0)                       # preempted back into the queue
    q.push(newcomer, iteration=0)
    assert newcomer.priority == 0
    assert [q.pop(), q.pop()] == [newcomer, veteran]


def test_within_a_level_first_come_first_served():
    q = MlfqQueue(1000, 10)
    a, b = request(priority=9, arrival_s=1.0), request(priority=1, arrival_s=2.0)
    q.push(b, 0)
    q.push(a, 0)
    assert [q.pop(), q.pop()] == [a, b]


def test_aging_still_promotes_a_bottom_level_request():
    q = MlfqQueue(starvation_threshold=3, running_quantum=5, first_quantum_tokens=1, levels=3)
    old = request(arrival_s=0.0)
    old.output_tokens = 100                              # bottom level
    q.push(old, iteration=0)
    for i in range(1, 4):                                # passed over by iterations 1-3
        q.push(request(arrival_s=float(i)), iteration=i)
        q.age(i)
    assert old.starvation_level == 0
    q.age(4)
    assert old.starvation_level == PROMOTED_LEVEL and q.peek() is old


def test_make_queue_builds_the_configured_discipline():
    assert type(make_queue(QueueConfig())) is AgingPriorityQueue
    assert isinstance(make_queue(QueueConfig(discipline="mlfq")), MlfqQueue)
    with pytest.raises(ValueError, match="engine-queue 'lifo'"):
        make_queue(QueueConfig(discipline="lifo"))
    assert make_queue(QueueConfig("mlfq", {"levels": 3})).levels == 3
