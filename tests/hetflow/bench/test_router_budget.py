"""The budget frontier: routers ranked by the gain they predict, scored by the trace's own probabilities."""

import random

import pytest

from hetflow.bench.router_budget import SHARES, frontier, recovered, table
from hetflow.core.confidence import logit, sigmoid
from hetflow.workloads.generate import generate
from simulator.signals import LearnedSignals

SMALL, LARGE = "qwen2.5-1.5b-instruct", "qwen2.5-7b-instruct"


@pytest.fixture(scope="module")
def firsts():
    return [r for r in generate("code", 800, seed=11, models=(SMALL, LARGE)) if not r.depends_on]


def test_the_probability_oracle_tops_every_share_and_the_visible_one_beats_chance(firsts):
    scores = frontier(firsts, SMALL, LARGE, None, seed=1)
    assert set(scores) == {"random", "visible-probability", "probability"}
    for i, _ in enumerate(SHARES):
        assert scores["probability"][i] >= scores["visible-probability"][i] > scores["random"][i]
    assert recovered(scores, "visible-probability") == pytest.approx(1.0)
    assert "| probability | 1 |" in table({1: scores})


def test_reading_two_noisy_heads_through_one_difficulty_recovers_more_of_the_gain(firsts):
    """A router whose heads each see the visible probability with noise of their own: the difference of the
    two is mostly noise, where one difficulty estimated from both keeps the gap's shape."""
    rng = random.Random(3)
    learned = {(r.program_id, r.stage_index): {m: sigmoid(logit(r.visible_solve_probability[m]) + rng.gauss(0, 0.6))
                                               for m in (SMALL, LARGE)} for r in firsts}
    abilities = {SMALL: logit(0.62), LARGE: logit(0.85)}    # the models' published HumanEval scores
    scores = frontier(firsts, SMALL, LARGE, LearnedSignals(confidence=learned, abilities=abilities), seed=1)
    assert recovered(scores, "learned-one-difficulty") > recovered(scores, "learned") + 0.2


def test_a_reliability_diagram_bins_confidences_against_answers(firsts):
    from hetflow.bench.router_budget import reliability

    knows = [{m: float(r.correct[m]) for m in (SMALL, LARGE)} for r in firsts]       # the outcome oracle
    points, error = reliability(firsts, knows, SMALL)
    assert error == 0.0 and sum(n for _, _, n in points) == len(firsts)
    assert [(q, solved) for q, solved, _ in points] == [(0.0, 0.0), (1.0, 1.0)]
    coin = [{SMALL: 0.5} for _ in firsts]                                             # says nothing
    (only,), error = reliability(firsts, coin, SMALL)
    solved = sum(r.correct[SMALL] for r in firsts) / len(firsts)
    assert only == (0.5, pytest.approx(solved), len(firsts)) and error == pytest.approx(abs(0.5 - solved))


def test_gap_quantiles_say_where_a_margin_would_cut():
    from hetflow.bench.router_budget import GAP_QUANTILES, gap_quantiles

    assert GAP_QUANTILES == (0.0, 0.1, 0.3, 0.5, 0.7, 0.8, 0.9, 1.0)
    assert gap_quantiles([0.3, 0.1, 0.2] + [0.25] * 8) == [0.1, 0.2, 0.25, 0.25, 0.25, 0.25, 0.25, 0.3]


def test_the_token_budget_spends_a_share_of_the_larger_models_tokens_best_ratio_first(firsts):
    from hetflow.bench.router_budget import TOKEN_SHARES, token_budget_score, token_frontier

    three = firsts[:3]
    tokens = [100.0, 300.0, 600.0]                  # 1,000 in all: 40% holds the first two, 30% the second alone
    base = [r.solve_probability[SMALL] for r in three]
    gain = [r.solve_probability[LARGE] - r.solve_probability[SMALL] for r in three]
    assert token_budget_score(three, [0, 1, 2], tokens, 0.4, SMALL, LARGE) == pytest.approx(
        (sum(base) + gain[0] + gain[1]) / 3)
    assert token_budget_score(three, [2, 1, 0], tokens, 0.3, SMALL, LARGE) == pytest.approx(   # 600 never fits
        (sum(base) + gain[1]) / 3)
    program_tokens = [float(r.output_tokens[LARGE]) for r in firsts]
    gains = {"random": [random.Random(2).random() for _ in firsts],
             "probability": [r.solve_probability[LARGE] - r.solve_probability[SMALL] for r in firsts]}
    scores = token_frontier(firsts, gains, program_tokens, program_tokens, SMALL, LARGE)
    assert set(scores) == {"random", "probability", "shortest"}
    for i, _ in enumerate(TOKEN_SHARES):     # true tokens as the prediction: the greedy order beats chance
        assert scores["probability"][i] > scores["shortest"][i] > scores["random"][i]
