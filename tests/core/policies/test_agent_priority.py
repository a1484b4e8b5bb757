"""Kairos 5.1-5.2 on handmade snapshots: the agent nearer the zero-latency anchor first, then the
program that started earlier."""

from dataclasses import replace

from hetflow.core.policies.agent_priority import AgentPriority
from hetflow.core.policies.contracts import Prediction, PriorityContext
from tests.factories import call, engine, snapshot


def key(agent_distance, program_start_s, now_s=1_700_000_000.0, median=None):
    e = engine("e", "m")
    snap = replace(snapshot(e, taken_unix_s=now_s), agent_anchor_distance_s=agent_distance,
                   program_start_s=program_start_s, anchor_distance_median_s=median)
    c, prediction = call(), Prediction(10)
    return AgentPriority().priority(c, prediction, PriorityContext.for_call(c, prediction, now_s, e, snap))


def test_nearer_agent_first_even_if_its_program_started_later():
    near_late, _ = key(2.0, 1_700_000_900.0)
    far_early, _ = key(2.5, 1_700_000_000.0)
    assert near_late < far_early


def test_same_agent_earlier_program_first_and_unknown_agents_by_start():
    early, choice = key(3.0, 1_700_000_000.0)
    late, _ = key(3.0, 1_700_000_001.0)
    assert early < late and choice.rule == "kairos:agent-priority"
    cold, c = key(None, 1_700_000_000.0)
    assert c.rule == "kairos:agent-unknown:median" and cold < early   # nothing known yet: by program start


def test_a_program_that_started_at_time_0_keeps_its_start_and_an_unseen_one_starts_now():
    """The simulator's clock starts at 0 s: a program first seen then is not one the monitor never saw."""
    first, choice = key(3.0, 0.0, now_s=50.0)
    later, _ = key(3.0, 10.0, now_s=50.0)
    unseen, unseen_choice = key(3.0, None, now_s=50.0)
    assert first < later < unseen
    assert choice.scores["program_start_s"] == 0.0 and unseen_choice.scores["program_start_s"] == 50.0


def test_an_unknown_agent_sits_at_the_known_agents_median_not_ahead_of_all():
    near, _ = key(1.0, 1_700_000_500.0, median=3.0)
    unknown, choice = key(None, 1_700_000_000.0, median=3.0)
    far, _ = key(5.0, 1_700_000_000.0, median=3.0)
    assert near < unknown < far and choice.scores["anchor_distance_s"] == 3.0


def test_the_order_is_lexicographic_however_close_the_distances_and_far_the_starts():
    """The packed key it replaces (distance x 1e7 + start) put a 1 us nearer agent behind a program
    that started 100 s earlier; the engine's queue now compares (distance, start)."""
    from hetflow.core.engine.aging_queue import AgingPriorityQueue
    from tests.factories import request

    nearer, _ = key(2.000000, 1_700_000_100.0)
    farther, _ = key(2.000001, 1_700_000_000.0)
    assert nearer < farther
    q = AgingPriorityQueue()
    late_near = request(priority=nearer.key, arrival_s=0.0)
    late_near.priority_tiebreak = nearer.tiebreak
    early_far = request(priority=farther.key, arrival_s=0.0)
    early_far.priority_tiebreak = farther.tiebreak
    q.push(early_far, 0)
    q.push(late_near, 0)
    assert q.pop() is late_near
