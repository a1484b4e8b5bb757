"""The routing solver's pieces (Cascadia 3.3, appendix C): escalation by thresholds, Q(theta), the
utopia and nadir points, and J on the paper's worked example."""

import math

import pytest

from hetflow.planner.routing import (
    SampledRequest,
    accepted_at,
    chebyshev_objective,
    latency_budget_objective,
    proportional_start,
    quality,
    reach,
    threshold_levels,
    utopia_nadir,
)

MODELS = ["s", "m", "l"]


def req(small, medium, large):
    return SampledRequest({n: 100 for n in MODELS}, {n: 50 for n in MODELS}, {"s": small, "m": medium, "l": large})


SAMPLE = [req(90, 95, 99), req(40, 80, 90), req(10, 30, 70), req(60, 50, 85)]


def test_the_papers_worked_example():
    # Cascadia 3.3: z1* = 0.95, z2* = 0.75, q_min = 0.90, mu = 100.
    assert chebyshev_objective(11.0, 0.88, 0.90, 0.95, 0.75, 100) == pytest.approx(21.0)
    assert chebyshev_objective(11.4, 0.91, 0.90, 0.95, 0.75, 100) == pytest.approx(11.4)
    assert chebyshev_objective(12.2, 0.93, 0.90, 0.95, 0.75, 100) == pytest.approx(12.2)


def test_a_request_is_accepted_at_the_first_model_type_whose_score_reaches_its_threshold():
    assert [accepted_at(r, MODELS, [50, 75]) for r in SAMPLE] == [0, 1, 2, 0]
    assert [accepted_at(r, MODELS, [math.inf, math.inf]) for r in SAMPLE] == [2, 2, 2, 2]
    assert reach(SAMPLE, MODELS, [50, 75]) == [[0, 1, 2, 3], [1, 2], [2]]
    assert quality(SAMPLE, MODELS, [50, 75]) == pytest.approx((90 + 80 + 70 + 60) / 4)


def test_utopia_is_everything_on_the_largest_and_nadir_everything_on_the_smallest():
    assert utopia_nadir(SAMPLE, MODELS) == (pytest.approx(86.0), pytest.approx(50.0))
    assert quality(SAMPLE, MODELS, [0, 0]) == pytest.approx(50.0)


def test_threshold_levels_run_from_accept_everything_to_forward_everything():
    levels = threshold_levels(SAMPLE, "s")
    assert levels[0] == 10 and levels[-1] == 91 and levels == sorted(levels)
    assert all(accepted_at(r, MODELS, [levels[-1], levels[-1]]) > 0 for r in SAMPLE)


def test_the_proportional_start_sends_half_to_the_second_model_and_a_third_to_the_third():
    sample = [req(s, s, 99) for s in range(100)]
    levels = [threshold_levels(sample, n) for n in MODELS[:2]]
    theta = proportional_start(sample, MODELS, levels)
    shares = [len(r) / len(sample) for r in reach(sample, MODELS, [levels[i][k] for i, k in enumerate(theta)])]
    assert shares[0] == 1.0
    assert shares[1] == pytest.approx(1 / 2, abs=0.06) and shares[2] == pytest.approx(1 / 3, abs=0.06)


def test_under_a_latency_budget_quality_counts_until_the_budget_is_exceeded():
    within = latency_budget_objective(9.0, 80.0, 10.0, 5.0, 25.0, nu=100)
    over = latency_budget_objective(12.0, 85.0, 10.0, 5.0, 25.0, nu=100)
    assert within == -80.0 and over == pytest.approx(-85.0 + 100 * 2 / 20)
    assert latency_budget_objective(math.inf, 99.0, 10.0, 5.0, 25.0, nu=100) == math.inf
