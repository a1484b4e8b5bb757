"""Reading a router's per-model confidences through one difficulty per prompt.

Chimera's router (3.3) gives each model an independent sigmoid, and its slack rule (3.6) acts on the
difference of two of them: whether the larger model's confidence exceeds the smaller's by the margin.
Each head is a noisy estimate of its model's chance, and the difference of two noisy estimates is
mostly noise: on code, the learned router's gap ranks programs barely better than chance
(``python -m hetflow.bench.router_budget``; docs/results.md, "A router's ceilings").

The workloads' item-response model (a two-parameter logistic model: Lord, 1980;
``hetflow/workloads/correctness.py``) says where the gap comes from: one difficulty b per item and one
ability theta_m per model, logit q_m = theta_m - b. Read that way, every head estimates the same b
(theta_m - logit q_m), their mean is a better estimate of it than either, and each model's confidence is
sigmoid(theta_m - b): the gap is then a function of one estimated difficulty, largest for items of
middling difficulty, where the larger model's extra ability decides. hetflow's reading, not Chimera's.
"""

from __future__ import annotations

import math
from typing import Mapping

READINGS = ("one-difficulty", "per-model")
"""How a router's confidences are read: through one difficulty per prompt (hetflow's default) or each
model's sigmoid as it is (Chimera 3.3)."""


def check_reading(reading: str) -> str:
    """``reading`` when it is one of ``READINGS``; a ValueError naming them otherwise."""
    if reading not in READINGS:
        raise ValueError(f"router.reading must be one of {', '.join(READINGS)}, got {reading!r}")
    return reading

CLIP = 1e-4
"""Probabilities are clipped to [CLIP, 1 - CLIP] before their logit."""


def logit(p: float) -> float:
    p = min(max(p, CLIP), 1.0 - CLIP)
    return math.log(p / (1.0 - p))


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def one_difficulty(confidence: Mapping[str, float], abilities: Mapping[str, float]) -> dict[str, float]:
    """Per-model confidences read with one difficulty per prompt: b = mean over models of
    theta_m - logit q_m, then q'_m = sigmoid(theta_m - b). ``abilities``: theta_m for every model of
    ``confidence`` (``abilities_from_rates``)."""
    difficulty = sum(abilities[m] - logit(q) for m, q in confidence.items()) / len(confidence)
    return {m: sigmoid(abilities[m] - difficulty) for m in confidence}


def abilities_from_rates(solve_rates: Mapping[str, float]) -> dict[str, float]:
    """Each model's ability as the logit of the share of a reference set it solves (a router artifact's
    training label rates): theta_m at the set's typical difficulty, b = 0."""
    return {m: logit(rate) for m, rate in solve_rates.items()}
