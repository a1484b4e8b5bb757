"""HexGen-Flow's two policies on handmade snapshots: workload-balanced engine choice (eq. 4) and the
urgency priority (eq. 5-8) computed at dispatch from the time left to the deadline."""

import pytest

from hetflow.core.policies import PolicyStore, Prediction, PriorityContext
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


def context(now_s: float) -> PriorityContext:
    e = engine("e", "m", engine_profile=FAST)
    return PriorityContext(now_s, e, snapshot(e, taken_unix_s=now_s))


def test_tighter_deadline_and_later_stage_share_are_more_urgent():
    rule = Urgency()
    tight, _ = rule.priority(call(deadline_unix_s=110.0, stage_index=1, stage_count=2), Prediction(100), context(100.0))
    loose, choice = rule.priority(call(deadline_unix_s=200.0, stage_index=1, stage_count=2), Prediction(100),
                                  context(100.0))
    assert tight < loose
    assert choice.scores["budget_s"] == pytest.approx(50.0)   # 100 s left, 2 alike stages: eq. 5 gives half
    last, last_choice = rule.priority(call(deadline_unix_s=200.0, stage_index=2, stage_count=2), Prediction(50),
                                      context(150.0))
    assert last_choice.scores["budget_s"] == pytest.approx(50.0)  # the last stage gets all that is left


def test_calls_without_deadline_follow_every_call_with_one_first_come_first_served():
    rule = Urgency()
    with_deadline, _ = rule.priority(call(deadline_unix_s=10_000.0), Prediction(100), context(0.0))
    first, choice = rule.priority(call(), Prediction(100), context(1.0))
    second, _ = rule.priority(call(), Prediction(100), context(2.0))
    assert with_deadline < first < second and choice.rule == "urgency:no-deadline"
    defaulted, c = Urgency(default_slo_scale=5.0).priority(call(), Prediction(100), context(1.0))
    assert c.rule == "urgency:default-slo" and defaulted < first


def test_default_slo_scale_puts_calls_with_less_work_left_first():
    rule = Urgency(default_slo_scale=5.0)
    short, _ = rule.priority(call(), Prediction(50), context(10.0))
    long, _ = rule.priority(call(), Prediction(5000), context(10.0))
    assert short < long
