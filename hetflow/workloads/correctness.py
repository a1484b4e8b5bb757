"""Per-model correctness from a two-parameter item-response model with label noise.

P(model m solves item i) = (1 - noise) * sigmoid(slope * (theta_m - b_i + bonus_v)) + noise / 2

- b_i, the item's difficulty, is computed from features its text carries (a math question's module
  and level; a code problem's size and structure), plus a little unexplained noise; so a router that
  reads the text can learn it, but not perfectly.
- bonus_v rewards workflow variants that plan and check (more stages, better answers).
- theta_m, the model's ability, is solved by bisection so that the model's mean P over the trace's
  items equals its published accuracy (hetflow.workloads.models).
- noise is label noise: a share of outcomes independent of model and item.

A trace keeps, beside each sampled outcome, the probability it was drawn from and the probability a
router could know from the prompt alone (``expected_solve_probability``): the ceilings a confidence
router is measured against.
"""

from __future__ import annotations

import math
from typing import Sequence

SLOPE = 1.7          # discrimination; 1.7 makes the logistic close to the normal ogive of classic IRT
LABEL_NOISE = 0.10


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def solve_probability(theta: float, difficulty: float, bonus: float = 0.0,
                      slope: float = SLOPE, noise: float = LABEL_NOISE) -> float:
    return (1.0 - noise) * sigmoid(slope * (theta - difficulty + bonus)) + noise / 2.0


def fit_ability(target_accuracy: float, difficulties: Sequence[float], bonuses: Sequence[float] | None = None,
                slope: float = SLOPE, noise: float = LABEL_NOISE) -> float:
    """theta such that the mean solve probability over the items equals ``target_accuracy``."""
    lo_acc, hi_acc = noise / 2.0, 1.0 - noise / 2.0
    if not lo_acc < target_accuracy < hi_acc:
        raise ValueError(f"accuracy {target_accuracy} is outside what label noise {noise} allows ({lo_acc}, {hi_acc})")
    bonuses = bonuses or [0.0] * len(difficulties)
    lo, hi = -20.0, 20.0
    for _ in range(80):
        mid = (lo + hi) / 2
        mean = (sum(solve_probability(mid, b, v, slope, noise) for b, v in zip(difficulties, bonuses))
                / len(difficulties))
        lo, hi = (mid, hi) if mean < target_accuracy else (lo, mid)
    return (lo + hi) / 2


def expected_solve_probability(theta: float, visible_difficulty: float, hidden_sd: float, bonus: float = 0.0,
                               slope: float = SLOPE, noise: float = LABEL_NOISE) -> float:
    """The solve probability averaged over the part of the difficulty the prompt does not show, taken as
    N(0, hidden_sd^2) around ``visible_difficulty``: E[sigmoid(x)] for x ~ N(mu, s^2) by the probit
    approximation sigmoid(mu / sqrt(1 + pi s^2 / 8)) (MacKay 1992), with mu = slope * (theta - visible +
    bonus) and s = slope * hidden_sd. What a router that read everything the text says could know."""
    mu, s = slope * (theta - visible_difficulty + bonus), slope * hidden_sd
    return (1.0 - noise) * sigmoid(mu / math.sqrt(1.0 + math.pi * s * s / 8.0)) + noise / 2.0
