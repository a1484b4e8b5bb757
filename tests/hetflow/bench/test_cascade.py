"""The cascade benchmark's rule on a tiny case: q_min between nadir and utopia, the stand-alone model the
smallest that reaches it, every run on the same SLO base, and a run's quality and queueing reported."""

import pytest

from hetflow.bench.cascade import CASCADE, replayed, setup, simulate, trace
from simulator.signals import LearnedSignals

pytestmark = pytest.mark.slow  # plans a cascade and simulates it


@pytest.fixture(scope="module")
def tiny():
    return setup(0, 3, trace(0, 80), 0.5, LearnedSignals(), duration_s=20.0)


def test_the_setup_follows_the_rule(tiny):
    assert tiny.nadir <= tiny.q_min <= tiny.utopia
    assert tiny.standalone_model in CASCADE and tiny.standalone
    assert {e.model for e in tiny.standalone} == {tiny.standalone_model}
    assert sum(a.gpus for a in tiny.cascade_plan.allocations) <= 3
    if tiny.pool_judge_plan is not None:  # the judge's calls need the largest model type's GPUs
        assert tiny.pool_judge_plan.allocations[-1].gpus > 0 and tiny.pool_judge_rate_calls_per_s > 0


def test_a_run_replays_the_rates_window_and_reports_quality_and_queueing(tiny):
    assert len({r.program_id for r in replayed(tiny, 1.0)}) == 80  # at least MIN_PROGRAMS: the whole trace
    systems = ["stand-alone", "cascade"] + ["cascade-judge-on-pool"] * (tiny.pool_judge_plan is not None)
    for system in systems:
        summary = simulate(tiny, system, 1.0, 5.0)
        assert summary["programs"] == 80 and 0 <= summary["quality"] <= 100
        assert 0 <= summary["queueing_share"] <= 1 and summary["trace_exhausted"]
    served = [a for a in tiny.cascade_plan.allocations if a.gpus]
    assert ("escalated_share" in simulate(tiny, "cascade", 1.0, 5.0)) == (len(served) > 1)
