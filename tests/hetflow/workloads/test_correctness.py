"""The item-response model: the probability a router could know from part of an item's difficulty."""

import random
import statistics

import pytest

from hetflow.workloads.correctness import expected_solve_probability, solve_probability


def test_with_nothing_hidden_the_expected_probability_is_the_probability():
    assert expected_solve_probability(0.4, 0.9, 0.0, bonus=0.2) == pytest.approx(solve_probability(0.4, 0.9, 0.2))


@pytest.mark.parametrize("theta, visible, hidden_sd", [(1.0, 0.0, 0.8), (-0.5, 0.3, 0.5), (0.2, -1.0, 1.2)])
def test_the_expected_probability_is_the_average_over_the_hidden_part(theta, visible, hidden_sd):
    rng = random.Random(1)
    sampled = statistics.mean(solve_probability(theta, visible + rng.gauss(0, hidden_sd)) for _ in range(40_000))
    assert expected_solve_probability(theta, visible, hidden_sd) == pytest.approx(sampled, abs=0.01)


def test_what_is_hidden_pulls_the_probability_towards_a_coin_toss():
    sure, unsure = solve_probability(2.0, 0.0), expected_solve_probability(2.0, 0.0, 1.0)
    assert 0.5 < unsure < sure
