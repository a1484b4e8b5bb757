"""The routing side of Cascadia's planner (3.3, appendix C): thresholds -> which model type answers each
sampled request, the system quality Q(theta), the utopia and nadir points, and the Chebyshev-guided
objective J.

A request starts on the smallest model type c_1; the judge scores the answer of c_i (i < C) and the
request is accepted there when the score reaches h_i, else forwarded to c_{i+1}; c_C accepts all
(Cascadia 3.3, figure 4). Q(theta) is the mean judge score of the accepted answers over the profiled
sample (footnote 3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence


@dataclass(frozen=True)
class SampledRequest:
    """One request of the profiled sample, as every model type of the cascade answered it."""

    input_tokens: Mapping[str, int]
    output_tokens: Mapping[str, int]
    score: Mapping[str, float]
    """The judge's grade of each model type's answer (Cascadia 4.1: 0-100)."""


def accepted_at(request: SampledRequest, models: Sequence[str], thresholds: Sequence[float]) -> int:
    """Index of the model type whose answer is accepted (Cascadia figure 4)."""
    for i, h in enumerate(thresholds):
        if request.score[models[i]] >= h:
            return i
    return len(models) - 1


def reach(sample: Sequence[SampledRequest], models: Sequence[str], thresholds: Sequence[float]) -> list[list[int]]:
    """For each model type, the indices of the sampled requests it processes (it, or a later one, answers)."""
    reached: list[list[int]] = [[] for _ in models]
    for k, request in enumerate(sample):
        for i in range(accepted_at(request, models, thresholds) + 1):
            reached[i].append(k)
    return reached


def quality(sample: Sequence[SampledRequest], models: Sequence[str], thresholds: Sequence[float]) -> float:
    """Q(theta): mean score of the accepted answers (Cascadia 3.3, footnote 3)."""
    return sum(r.score[models[accepted_at(r, models, thresholds)]] for r in sample) / len(sample)


def utopia_nadir(sample: Sequence[SampledRequest], models: Sequence[str]) -> tuple[float, float]:
    """(z1*, z2*): the quality with every request on the largest model type, and on the smallest
    (Cascadia 3.3)."""
    return (sum(r.score[models[-1]] for r in sample) / len(sample),
            sum(r.score[models[0]] for r in sample) / len(sample))


def chebyshev_objective(latency_s: float, q: float, q_min: float, utopia: float, nadir: float, mu: float) -> float:
    """J(theta) = L(theta) + mu * max{0, (q_min - Q(theta)) / (z1* - z2*)} (Cascadia 3.3)."""
    return latency_s + mu * max(0.0, (q_min - q) / (utopia - nadir))


def latency_budget_objective(latency_s: float, q: float, latency_max_s: float, best_latency_s: float,
                             worst_latency_s: float, nu: float) -> float:
    """-Q(theta) + nu * max{0, L(theta) - L_max} / (z*_lat,max - z*_lat,min) (Cascadia appendix C)."""
    span = worst_latency_s - best_latency_s
    excess = max(0.0, latency_s - latency_max_s)
    if not math.isfinite(latency_s):
        return math.inf
    return -q + nu * (excess / span if span > 0 else (math.inf if excess > 0 else 0.0))


def threshold_levels(sample: Sequence[SampledRequest], model: str, steps: int = 20) -> list[float]:
    """Candidate thresholds for one model type: its scores' quantiles at 0, 1/steps, ..., 1, then one
    above its best score (forward every request). Ascending: a higher level forwards more."""
    scores = sorted(r.score[model] for r in sample)
    quantiles = {scores[min(len(scores) - 1, round(k / steps * (len(scores) - 1)))] for k in range(steps + 1)}
    return sorted(quantiles) + [scores[-1] + 1.0]


def _forwarded(sample: Sequence[SampledRequest], models: Sequence[str], levels: Sequence[Sequence[float]],
               head: Sequence[int]) -> float:
    """Share of requests forwarded past the last model type ``head`` sets a threshold for."""
    thresholds = [levels[j][k] for j, k in enumerate(head)]
    return sum(accepted_at(r, models, thresholds) >= len(head) for r in sample) / len(sample)


def proportional_start(sample: Sequence[SampledRequest], models: Sequence[str],
                       levels: Sequence[Sequence[float]]) -> tuple[int, ...]:
    """theta_0: the i-th model type receives 1/i of the requests (Cascadia 3.3), as near as the levels
    allow: each threshold in turn, the level whose share reaching the next model is closest."""
    chosen: list[int] = []
    for i in range(len(models) - 1):
        target = 1.0 / (i + 2)
        chosen.append(min(range(len(levels[i])), key=lambda level: abs(_forwarded(sample, models, levels, [
            *chosen, level]) - target)))
    return tuple(chosen)
