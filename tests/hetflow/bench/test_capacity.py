"""Capacity at SLO: the bisection, and a tiny cluster whose capacity is known in closed form."""

import pytest

from hetflow.bench.capacity import Capacity, Probe, SloRule, find_capacity
from hetflow.bench.sweep import simulate
from hetflow.core.engine.profile import EngineSpec
from hetflow.core.presets import resolve
from hetflow.core.trace import StageRecord
from simulator.signals import Signals
from tests.factories import profile


def test_the_bisection_brackets_a_step_within_its_tolerance_from_either_side():
    for start in (0.5, 20.0):
        found = find_capacity(lambda rate: Probe(rate, rate <= 3.7), start, rel_tol=0.01)
        assert found.rate_per_s <= 3.7 < found.failed_above_per_s <= found.rate_per_s * 1.01
        assert all(p.passed == (p.rate_per_s <= 3.7) for p in found.probes)


def test_a_policy_that_never_meets_the_slo_has_no_capacity_and_one_that_always_does_hits_the_ceiling():
    assert find_capacity(lambda rate: Probe(rate, False), 1.0, min_rate_per_s=0.1).rate_per_s == 0.0
    always = find_capacity(lambda rate: Probe(rate, True), 1.0, max_rate_per_s=50.0)
    assert always.rate_per_s == 50.0 and always.failed_above_per_s is None and always.search_bound
    assert [p.rate_per_s for p in always.probes] == [1, 2, 4, 8, 16, 32, 50]   # the maximum itself is probed


def test_a_capacity_between_the_last_doubling_and_the_maximum_is_found_not_capped():
    found = find_capacity(lambda rate: Probe(rate, rate <= 80.0), 1.0, rel_tol=0.01, max_rate_per_s=100.0)
    assert found.rate_per_s <= 80.0 < found.failed_above_per_s <= found.rate_per_s * 1.01
    assert not found.search_bound


def test_a_bad_rule_is_refused():
    with pytest.raises(ValueError):
        SloRule(slo_scale=0.5)
    with pytest.raises(ValueError):
        SloRule(attainment=0.0)


@pytest.mark.slow
def test_one_request_at_a_time_of_fixed_size_has_capacity_one_over_its_service_time():
    """One engine that runs one request at a time; every program is one call of the same size, arriving
    evenly: below 1/S no queue ever forms, above it the queue grows without bound. Capacity = 1/S."""
    serial = profile(max_num_seqs=1)
    service_s = serial.isolated_request_s(100, 40)
    trace = [StageRecord(program_id=f"p{k}", workflow="w", variant="v", stage_index=1, stage_count=1, agent="a",
                         upstream_agent="", depends_on=[], system_prompt="", user_prompt="",
                         input_tokens={"test": 100}, output_tokens={"test": 40}, correct={}, arrival_s=float(k))
             for k in range(200)]
    rule, preset = SloRule(slo_scale=5.0), resolve("least-load")

    def probe(rate: float) -> Probe:
        summary = simulate([EngineSpec("e0", "test", serial)], preset, trace, Signals("oracle", "oracle"), rate,
                           slo_scale=rule.slo_scale)
        return Probe(rate, rule.met_by(summary))

    found = find_capacity(probe, 1.0, rel_tol=0.01)
    assert 0.97 / service_s <= found.rate_per_s <= 1.02 / service_s


def summary(span_s=1000.0, p50_s=10.0, steady=True, within=1.0, rejected=0):
    return {"programs": 100, "rejected_calls": rejected, "arrival_span_s": span_s, "latency_s": {"p50": p50_s},
            "steady_stability": {"stable": steady}, "within_slo_share": within}


def test_the_rule_needs_a_sustained_steady_run_that_meets_the_slo_and_loses_nothing():
    rule = SloRule()
    assert rule.met_by(summary())
    assert not rule.met_by(summary(span_s=30.0))            # the trace arrived as a batch: not a rate
    assert not rule.met_by(summary(steady=False))
    assert not rule.met_by(summary(within=0.94))
    assert not rule.met_by(summary(rejected=1))
    assert rule.failures(summary(span_s=30.0, within=0.9)) == ("not sustained", "below SLO")
    assert rule.failures({"programs": 0}) == ("no programs",)


def test_a_capacity_whose_next_rate_failed_only_for_its_short_trace_is_a_lower_bound():
    def capacity(*failures_above: str) -> Capacity:
        return find_capacity(lambda rate: Probe(rate, rate <= 2.0, failures=() if rate <= 2.0 else failures_above),
                             1.0, rel_tol=0.05)

    assert capacity("not sustained").trace_bound
    assert not capacity("not sustained", "unstable").trace_bound
    assert not capacity("below SLO").trace_bound
    assert not find_capacity(lambda rate: Probe(rate, True), 1.0, max_rate_per_s=8.0).trace_bound


def test_programs_no_engine_could_ever_hold_are_left_out_of_every_policys_trace():
    from hetflow.bench.sweep import servable
    from tests.factories import profile

    def record(pid, tokens):
        return StageRecord(program_id=pid, workflow="w", variant="v", stage_index=1, stage_count=1, agent="a",
                           upstream_agent="", depends_on=[], system_prompt="", user_prompt="",
                           input_tokens={"m": tokens}, output_tokens={"m": 10}, correct={}, arrival_s=0.0)

    engines = [EngineSpec("e0", "m", profile(kv_capacity_tokens=4096, max_model_len=4096))]
    kept, dropped = servable([record("ok", 100), record("huge", 5000)], engines)
    assert [r.program_id for r in kept] == ["ok"] and dropped == ["huge"]


def test_the_capacity_table_marks_both_kinds_of_lower_bound():
    from hetflow.bench.sweep_cli import capacity_table

    row = {"policy": "p", "capacity_per_s": [10.0, 20.0, 30.0], "trace_bound": [True, False, False],
           "search_bound": [False, False, True], "mean_per_s": 20.0, "min_per_s": 10.0, "max_per_s": 30.0,
           "vs_baseline": None, "vs_baseline_min": None, "queueing_share_at_capacity": None,
           "prefix_hit_rate_at_capacity": None, "p95_s_at_capacity": None, "longest_decile_p95_s_at_capacity": None}
    text = capacity_table([row])
    assert "| >=10, 20, >=30 |" in text
    assert "trace's length" in text and "search's highest rate" in text


def test_a_first_step_of_one_tolerance_brackets_a_start_at_the_capacity_in_two_probes():
    found = find_capacity(lambda rate: Probe(rate, rate <= 1.05), 1.0, rel_tol=0.1, first_step=1.1)
    assert [p.rate_per_s for p in found.probes] == [1.0, pytest.approx(1.1)]
    assert (found.rate_per_s, found.failed_above_per_s) == (1.0, pytest.approx(1.1))
    far = find_capacity(lambda rate: Probe(rate, rate <= 3.0), 1.0, rel_tol=0.1, first_step=1.1)
    steps = [b / a for a, b in zip([p.rate_per_s for p in far.probes], [p.rate_per_s for p in far.probes][1:])]
    assert steps[:4] == pytest.approx([1.1, 1.21, 1.4641, 2.0])  # each step the last one's square, up to 2
    assert far.rate_per_s <= 3.0 < far.failed_above_per_s <= far.rate_per_s * 1.1
    low = find_capacity(lambda rate: Probe(rate, rate <= 0.5), 1.0, rel_tol=0.1, first_step=1.1)
    assert low.rate_per_s <= 0.5 < low.failed_above_per_s <= low.rate_per_s * 1.1
    for start in (1.821, 1.84, 1.861):   # start * 1.1 / start rounds one unit over 1.1: still two probes
        at_start = find_capacity(lambda rate, cap=start: Probe(rate, rate <= cap), start, rel_tol=0.1, first_step=1.1)
        assert len(at_start.probes) == 2


def test_the_sweeps_doubling_is_the_default_first_step():
    doubled = find_capacity(lambda rate: Probe(rate, rate <= 5.0), 1.0, rel_tol=0.01)
    assert [p.rate_per_s for p in doubled.probes][:4] == [1.0, 2.0, 4.0, 8.0]
    with pytest.raises(ValueError):
        find_capacity(lambda rate: Probe(rate, True), 1.0, first_step=2.5)
