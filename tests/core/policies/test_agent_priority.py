"""Kairos 5.1-5.2 on handmade snapshots: the agent nearer the zero-latency anchor first, then the
program that started earlier."""

from dataclasses import replace

from hetflow.core.policies import Prediction, PriorityContext
from hetflow.core.policies.agent_priority import AgentPriority
from tests.factories import call, engine, snapshot


def key(agent_distance, program_start_s, now_s=1_700_000_000.0):
    e = engine("e", "m")
    snap = replace(snapshot(e, taken_unix_s=now_s), agent_anchor_distance_s=agent_distance,
                   program_start_s=program_start_s)
    return AgentPriority().priority(call(), Prediction(10), PriorityContext(now_s, e, snap))


def test_nearer_agent_first_even_if_its_program_started_later():
    near_late, _ = key(2.0, 1_700_000_900.0)
    far_early, _ = key(2.5, 1_700_000_000.0)
    assert near_late < far_early


def test_same_agent_earlier_program_first_and_unknown_agents_by_start():
    early, choice = key(3.0, 1_700_000_000.0)
    late, _ = key(3.0, 1_700_000_001.0)
    assert early < late and choice.rule == "kairos:agent-priority"
    unknown, c = key(None, 1_700_000_000.0)
    assert c.rule == "kairos:agent-unknown" and unknown < early
