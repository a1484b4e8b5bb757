"""Confidences read through one difficulty per prompt (the item-response model's shape)."""

import pytest

from hetflow.core.confidence import abilities_from_rates, logit, one_difficulty, sigmoid

ABILITIES = {"small": 0.0, "large": 1.0}


def test_confidences_of_one_difficulty_are_read_back_unchanged():
    for difficulty in (-2.0, 0.0, 0.7, 3.0):
        confidence = {m: sigmoid(theta - difficulty) for m, theta in ABILITIES.items()}
        assert one_difficulty(confidence, ABILITIES) == pytest.approx(confidence)


def test_the_gap_follows_the_mean_difficulty_not_the_heads_disagreement():
    """Two prompts whose heads disagree in opposite ways but estimate the same mean difficulty read alike;
    raw, their gaps differ in sign."""
    one = {"small": sigmoid(0.5), "large": sigmoid(0.5)}     # per head: b = -0.5 and 0.5
    other = {"small": sigmoid(-0.5), "large": sigmoid(1.5)}  # per head: b = 0.5 and -0.5
    assert one["large"] - one["small"] == 0.0 < other["large"] - other["small"]
    assert one_difficulty(one, ABILITIES) == pytest.approx(one_difficulty(other, ABILITIES))
    read = one_difficulty(one, ABILITIES)
    assert read["large"] > read["small"]                    # the larger ability always leads


def test_abilities_are_the_logits_of_the_solve_rates():
    assert abilities_from_rates({"a": 0.5, "b": 0.75}) == pytest.approx({"a": 0.0, "b": logit(0.75)})
