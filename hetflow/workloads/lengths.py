"""Output lengths per stage, calibrated to published per-workflow totals.

A family lists its variants (with their frequency) and, per stage, the agent and its share of the
workflow's output. A stage's output is log-normal around ``scale * share``; with probability ``q``
the last stage of a workflow runs away to ``runaway_tokens`` (small models sometimes loop until the
limit: this is the heavy tail Chimera 4.1 reports, a std near 3x the mean for Qwen2.5-1.5B).
``scale`` and ``q`` (and, where the spread is small, sigma) are solved so that the total per workflow
has the published mean and standard deviation, by Monte Carlo on a fixed seed.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

BASE_SIGMA = 0.6
CALIBRATION_SAMPLES = 40_000
ITEM_WEIGHT = 0.4
"""Share of a stage's log-normal spread tied to the item: log length = ... + ITEM_WEIGHT * z_item +
sqrt(sigma^2 - ITEM_WEIGHT^2) * noise, with z_item a standardised feature the text carries (longer
reference solutions, harder levels, more complex SQL give longer outputs). With z_item ~ N(0, 1) the
total spread is sigma, as calibrated."""


@dataclass(frozen=True)
class VariantShape:
    name: str
    weight: float
    """How often this variant is chosen."""
    shares: tuple[float, ...]
    """Relative output of each stage, in stage order."""


@dataclass(frozen=True)
class StageLengths:
    scale: float
    sigma: float
    runaway_prob: float
    runaway_tokens: int

    def sample(self, rng: random.Random, shares: tuple[float, ...], item_z: float = 0.0) -> list[int]:
        item = min(ITEM_WEIGHT, self.sigma) * item_z
        residual = math.sqrt(max(self.sigma ** 2 - ITEM_WEIGHT ** 2, 0.0))
        out = [max(1, int(round(self.scale * s * math.exp(item + rng.gauss(-self.sigma ** 2 / 2, residual)))))
               for s in shares]
        if rng.random() < self.runaway_prob:
            out[-1] = self.runaway_tokens
        return out


def _totals(shapes: tuple[VariantShape, ...], scale: float, sigma: float, q: float, runaway: int,
            z: np.ndarray, u: np.ndarray, pick: np.ndarray) -> np.ndarray:
    totals = np.zeros(len(pick))
    for k, shape in enumerate(shapes):
        rows = pick == k
        n = len(shape.shares)
        stages = scale * np.array(shape.shares) * np.exp(sigma * z[rows, :n] - sigma ** 2 / 2)
        stages[:, -1] = np.where(u[rows] < q, runaway, stages[:, -1])
        totals[rows] = stages.sum(axis=1)
    return totals


@lru_cache(maxsize=64)
def calibrate(shapes: tuple[VariantShape, ...], mean: float, std: float, runaway_tokens: int) -> StageLengths:
    """scale, runaway probability and sigma giving totals of ``mean`` and ``std`` tokens."""
    rng = np.random.default_rng(0)
    weights = np.array([s.weight for s in shapes]) / sum(s.weight for s in shapes)
    pick = rng.choice(len(shapes), size=CALIBRATION_SAMPLES, p=weights)
    z = rng.standard_normal((CALIBRATION_SAMPLES, max(len(s.shares) for s in shapes)))
    u = rng.random(CALIBRATION_SAMPLES)

    def fit_scale(sigma: float, q: float) -> tuple[float, float]:
        unit = _totals(shapes, 1.0, sigma, 0.0, 0, z, u, pick)
        last = _totals(shapes, 1.0, sigma, 1.0, 0, z, u, pick)          # totals without the last stage
        runaway_share = (u < q)
        # mean(T) = scale * mean(unit - runaway_share * (unit - last)) + q * runaway_tokens
        base = np.mean(unit - runaway_share * (unit - last))
        scale = max(1e-6, (mean - runaway_share.mean() * runaway_tokens) / base)
        return scale, _totals(shapes, scale, sigma, q, runaway_tokens, z, u, pick).std()

    sigma, q = BASE_SIGMA, 0.0
    _, spread = fit_scale(sigma, 0.0)
    if spread > std:                       # narrow spread: no runaways, smaller sigma
        lo, hi = 0.01, BASE_SIGMA
        for _ in range(40):
            sigma = (lo + hi) / 2
            lo, hi = (sigma, hi) if fit_scale(sigma, 0.0)[1] < std else (lo, sigma)
    else:                                  # heavy tail: runaways
        lo, hi = 0.0, 0.95 * mean / runaway_tokens
        for _ in range(40):
            q = (lo + hi) / 2
            lo, hi = (q, hi) if fit_scale(sigma, q)[1] < std else (lo, q)
    scale, _ = fit_scale(sigma, q)
    return StageLengths(float(scale), float(sigma), float(q), runaway_tokens)
