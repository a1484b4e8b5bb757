"""HexGen-Flow's two policies on handmade snapshots: workload-balanced engine choice (eq. 4) and the
urgency priority (eq. 5-8) computed at dispatch from the time left to the deadline."""

from dataclasses import replace

import pytest

from hetflow.core.policies.contracts import PolicyStore, Prediction, PriorityContext
from hetflow.core.policies.urgency import Urgency
from hetflow.core.policies.workload_balanced import WorkloadBalanced
from tests.factories import call, engine, profile, snapshot

FAST, SLOW = profile(decode_base_ms=5.0), profile(decode_base_ms=40.0)


def test_alpha_zero_balances_queues_and_alpha_one_picks_the_fastest_engine():
    snap = snapshot(engine("fast", "m", in_flight_cost_s=50.0, engine_profile=FAST),
                    engine("slow", "m", in_flight_cost_s=1.0, engine_profile=SLOW))
    assert WorkloadBalanced().pick(call(), snap, "m", Prediction(200), PolicyStore(alpha=0.0)).chosen == "slow"
    choice = WorkloadBalanced().pick(call(), snap, "m", Prediction(200), PolicyStore(alpha=1.0))
    assert choice.chosen == "fast" and choice.rule == "hexgen:workload-balanced"
    assert set(choice.scores) == {"fast", "slow"} and choice.loads == {"fast": 50.0, "slow": 1.0}


def test_workload_balanced_rejects_alpha_outside_the_unit_interval():
    with pytest.raises(ValueError):
        WorkloadBalanced(alpha=1.5)


def urgency_of(rule, c, prediction, now_s, e=None, snap=None):
    """The rule's priority for call ``c`` at ``now_s`` on ``e`` (a FAST engine alone by default)."""
    e = e or engine("e", "m", engine_profile=FAST)
    snap = snap or snapshot(e, taken_unix_s=now_s)
    return rule.priority(c, prediction, PriorityContext.for_call(c, prediction, now_s, e, snap))


def test_tighter_deadline_and_later_stage_share_are_more_urgent():
    rule = Urgency()
    tight, _ = urgency_of(rule, call(deadline_unix_s=110.0, stage_index=1, stage_count=2), Prediction(100),
                          100.0)
    loose, choice = urgency_of(rule, call(deadline_unix_s=200.0, stage_index=1, stage_count=2), Prediction(100),
                               100.0)
    assert tight < loose
    assert choice.scores["budget_s"] == pytest.approx(50.0)   # 100 s left, 2 alike stages: eq. 5 gives half
    last, last_choice = urgency_of(rule, call(deadline_unix_s=200.0, stage_index=2, stage_count=2), Prediction(50),
                                   150.0)
    assert last_choice.scores["budget_s"] == pytest.approx(50.0)  # the last stage gets all that is left


def test_calls_without_deadline_follow_every_call_with_one_first_come_first_served():
    rule = Urgency()
    with_deadline, _ = urgency_of(rule, call(deadline_unix_s=10_000.0), Prediction(100), 0.0)
    first, choice = urgency_of(rule, call(), Prediction(100), 1.0)
    second, _ = urgency_of(rule, call(), Prediction(100), 2.0)
    assert with_deadline < first < second and choice.rule == "urgency:no-deadline"
    defaulted, c = urgency_of(Urgency(default_slo_scale=5.0), call(), Prediction(100), 1.0)
    assert c.rule == "urgency:default-slo" and defaulted < first


def test_default_slo_scale_puts_calls_with_less_work_left_first():
    rule = Urgency(default_slo_scale=5.0)
    short, _ = urgency_of(rule, call(max_tokens=8192), Prediction(50), 10.0)
    long, _ = urgency_of(rule, call(max_tokens=8192), Prediction(5000), 10.0)
    assert short < long


def test_the_default_slo_runs_from_a_program_start_at_time_0_and_from_now_for_one_never_seen():
    rule, e = Urgency(default_slo_scale=5.0), engine("e", "m", engine_profile=FAST)
    at_0 = replace(snapshot(e, taken_unix_s=10.0), program_start_s=0.0)
    started_at_0, spent = urgency_of(rule, call(), Prediction(100), 10.0, e, at_0)
    never_seen, fresh = urgency_of(rule, call(), Prediction(100), 10.0, e, snapshot(e, taken_unix_s=10.0))
    assert fresh.scores["remaining_s"] == pytest.approx(5.0 * fresh.scores["stages_cost_s"])
    assert spent.scores["remaining_s"] == pytest.approx(fresh.scores["remaining_s"] - 10.0)
    assert started_at_0 < never_seen


def test_budgets_split_by_each_remaining_stages_mean_cost_as_in_figure_3():
    """HexGen-Flow figure 3: a 100 ms SLO over two stages whose mean costs are 40 and 60 ms gives the
    first a 40 ms budget; it takes 50 ms, so the second gets the 50 ms left, not its 60 ms share."""
    e = engine("e", "m", engine_profile=profile(prefill_ms_per_token=0.0, decode_base_ms=1.0, decode_ms_per_seq=0.0,
                                                decode_ms_per_batch_token=0.0))
    rule = Urgency()
    first = call(deadline_unix_s=0.1, stage_index=1, stage_count=2, input_tokens=1, max_tokens=256)
    snap = replace(snapshot(e, taken_unix_s=0.0), remaining_stage_costs_s=(0.060,))
    _, choice = urgency_of(rule, first, Prediction(80), 0.0, e, snap)  # 40 tokens x 1 ms: 40 ms
    assert choice.scores["budget_s"] == pytest.approx(0.040)
    assert choice.scores["stages_cost_s"] == pytest.approx(0.100)
    second = call(deadline_unix_s=0.1, stage_index=2, stage_count=2, input_tokens=1, max_tokens=256)
    snap = replace(snapshot(e, taken_unix_s=0.050), remaining_stage_costs_s=())
    _, choice = urgency_of(rule, second, Prediction(60), 0.050, e, snap)  # 60 ms, 50 ms left
    assert choice.scores["budget_s"] == pytest.approx(0.050)


def test_a_later_costlier_stage_takes_more_of_the_time_than_an_even_split():
    e = engine("e", "m", engine_profile=profile(prefill_ms_per_token=0.0, decode_base_ms=1.0, decode_ms_per_seq=0.0,
                                                decode_ms_per_batch_token=0.0))
    first = call(deadline_unix_s=1.0, stage_index=1, stage_count=3, input_tokens=1, max_tokens=256)
    learned = replace(snapshot(e), remaining_stage_costs_s=(0.3, 0.6))
    unseen = replace(snapshot(e), remaining_stage_costs_s=(0.0, 0.0))
    _, with_costs = urgency_of(Urgency(), first, Prediction(300), 0.0, e, learned)   # 100 ms here
    _, even = urgency_of(Urgency(), first, Prediction(300), 0.0, e, unseen)
    assert with_costs.scores["budget_s"] == pytest.approx(0.1)          # 1 s x 0.1 / (0.1 + 0.3 + 0.6)
    assert even.scores["budget_s"] == pytest.approx(1.0 / 3)            # unseen stages count as this one
