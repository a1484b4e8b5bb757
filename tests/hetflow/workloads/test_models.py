"""Length calibration and the item-response model reproduce the published figures they target."""

import random
import statistics

import pytest

from hetflow.workloads import arrivals
from hetflow.workloads.correctness import fit_ability, solve_probability
from hetflow.workloads.families import code
from hetflow.workloads.lengths import calibrate
from hetflow.workloads.models import MODELS


@pytest.mark.parametrize("model, mean, std", [("qwen2.5-1.5b-instruct", 447, 1276), ("qwen2.5-14b-instruct", 649, 534)])
def test_code_lengths_match_chimera_totals(model, mean, std):
    assert MODELS[model].total_output("code") == (mean, std)
    lengths = calibrate(code.SHAPES, mean, std, code.RUNAWAY_TOKENS)
    rng = random.Random(0)
    totals = [sum(lengths.sample(rng, rng.choice(code.SHAPES).shares)) for _ in range(40_000)]
    assert statistics.mean(totals) == pytest.approx(mean, rel=0.08)
    assert statistics.pstdev(totals) == pytest.approx(std, rel=0.15)


def test_interpolated_model_sits_between_the_published_ones():
    m3 = MODELS["qwen2.5-3b-instruct"].total_output("code")
    assert 447 < m3[0] < 649 and 534 < m3[1] < 1276


def test_fitted_ability_gives_the_target_accuracy():
    difficulties = [(-1) ** i * (i % 7) / 3 for i in range(200)]
    theta = fit_ability(0.7, difficulties)
    assert statistics.mean(solve_probability(theta, b) for b in difficulties) == pytest.approx(0.7, abs=1e-6)
    with pytest.raises(ValueError):
        fit_ability(0.99, difficulties)   # beyond what 10% label noise allows


def test_gamma_arrivals_are_burstier_than_poisson():
    def cv(times):
        gaps = [b - a for a, b in zip([0.0] + times, times)]
        return statistics.pstdev(gaps) / statistics.mean(gaps)

    poisson, bursty = arrivals.poisson(4000, 2.0, random.Random(0)), arrivals.gamma(4000, 2.0, 3.0, random.Random(0))
    assert cv(poisson) == pytest.approx(1.0, abs=0.1) and cv(bursty) == pytest.approx(3.0, abs=0.4)
    assert poisson[-1] == pytest.approx(2000, rel=0.1)
