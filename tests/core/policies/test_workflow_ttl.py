"""The retention rule: how long a program's KV is kept across its tool call (issue 35), on handmade
programs and engines."""

import math
from dataclasses import replace

import pytest

from hetflow.core.engine.profile import load_profile
from hetflow.core.kv_retention import LogNormalFit, best_hold_s
from hetflow.core.policies.contracts import Prediction, PriorityContext
from hetflow.core.policies.free_at_finish import FreeAtFinish
from hetflow.core.policies.program_ledger import fitted_acting_ttl_s
from hetflow.core.policies.workflow_ttl import WorkflowTtl
from hetflow.core.snapshot import ClusterSnapshot, view_with
from tests.factories import call, engine

GAP_2S = LogNormalFit(math.log(2.0), 0.3, 20)
"""An agent whose tool calls take about 2 s."""
L4_7B = load_profile("qwen2.5-7b-instruct@l4", kv_capacity_tokens=100_000)
"""Recomputing a 20k-token context takes it about 5.5 s."""


def context_for(c, gap: LogNormalFit | None, waiting: int = 0, kv_cache_usage: float = 0.1) -> PriorityContext:
    e = view_with(engine("e0", "m", engine_profile=L4_7B), waiting=waiting,
                  kv_cache_usage=kv_cache_usage)
    return PriorityContext.for_call(c, Prediction(200.0), 0.0, e,
                                    ClusterSnapshot(taken_unix_s=0.0, engines=(e,), agent_tool_gap=gap))


def agent_call(stage_index: int = 1, stage_count: int = 3):
    return call(input_tokens=20_000, max_tokens=400, workflow="w", agent="coder", stage_index=stage_index,
                stage_count=stage_count)


def test_a_program_s_last_stage_keeps_nothing():
    c = agent_call(stage_index=3)
    hold_s, choice = WorkflowTtl().hold_s(c, context_for(c, GAP_2S))
    assert hold_s == 0.0 and choice.rule == "last-stage"


def test_no_hold_before_the_agent_s_first_gap():
    c = agent_call()
    hold_s, choice = WorkflowTtl().hold_s(c, context_for(c, None))
    assert hold_s == 0.0 and choice.rule == "no-tool-gap-seen"


def test_an_idle_engine_keeps_the_context_past_most_gaps_and_explains_why():
    c = agent_call()
    hold_s, choice = WorkflowTtl().hold_s(c, context_for(c, GAP_2S))
    assert choice.rule == "hold-for-next-call" and 2.0 < hold_s <= 30.0
    assert choice.params["p_next_within"] > 0.9 and choice.params["gap_samples"] == 20
    assert choice.params["miss_impact_s"] == pytest.approx(L4_7B.isolated_request_s(20_000 + round(200 / 3), 1))


def test_a_call_with_no_context_on_an_idle_engine_keeps_nothing():
    c = call(input_tokens=0, max_tokens=400, workflow="w", agent="coder", stage_index=1, stage_count=3)
    e = view_with(engine("e0", "m", engine_profile=L4_7B), kv_cache_usage=0.1)
    no_output = PriorityContext.for_call(c, Prediction(0.0), 0.0, e,
                                         ClusterSnapshot(taken_unix_s=0.0, engines=(e,), agent_tool_gap=GAP_2S))
    hold_s, choice = WorkflowTtl().hold_s(c, no_output)
    assert hold_s == 0.0 and choice.rule == "no-context"


def test_calls_waiting_at_the_engine_shorten_the_hold():
    c = agent_call()
    idle_s, _ = WorkflowTtl().hold_s(c, context_for(c, GAP_2S))
    busy_s, choice = WorkflowTtl().hold_s(c, context_for(c, GAP_2S, waiting=3))
    assert choice.params["hold_cost"] == 1.0 and busy_s < idle_s
    assert busy_s <= choice.params["miss_impact_s"]          # never held longer than a miss would cost


def test_gaps_longer_than_a_miss_costs_are_not_worth_holding_for_on_a_busy_engine():
    c = agent_call()
    hold_s, choice = WorkflowTtl().hold_s(c, context_for(c, LogNormalFit(math.log(600.0), 0.2, 50), waiting=3))
    assert hold_s == 0.0 and choice.rule == "not-worth-holding"


def test_the_baseline_decides_no_hold():
    c = agent_call()
    assert FreeAtFinish().hold_s(c, context_for(c, GAP_2S))[0] is None  # freed at once; the monitor's idle time


def test_the_router_s_ttl_is_the_utility_with_unit_holding_cost():
    gaps_s = [1.0, 2.0, 4.0, 2.5]
    fit = LogNormalFit.of(gaps_s)
    assert fitted_acting_ttl_s(gaps_s, 3.0, 10.0) == best_hold_s(fit, 3.0, 3.0, 1.0)[0] > 0
    assert replace(fit, samples=1).within(0.0) == 0.0


@pytest.mark.parametrize("bad", [{"max_hold_s": -1.0}, {"single_gap_sigma": 0.0}, {"busy_hold_cost": 0.0}])
def test_bad_parameters_are_refused(bad):
    with pytest.raises(ValueError):
        WorkflowTtl(**bad)
