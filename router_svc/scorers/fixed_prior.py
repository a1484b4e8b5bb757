"""Baseline: the same confidence for every prompt, one fixed prior per model.

This is Chimera's "without router" ablation (4.4, figure 6): the slack rule then always prefers the
model with the higher prior when its latency allows, with no per-query signal.
"""

from __future__ import annotations

from typing import Mapping


class FixedPriorScorer:
    def __init__(self, models: Mapping[str, float]) -> None:
        """``models``: each model with the confidence returned for every prompt."""
        priors = models
        if not priors:
            raise ValueError("router.models must name at least one model with its prior")
        for model, prior in priors.items():
            if not 0.0 <= float(prior) <= 1.0:
                raise ValueError(f"router prior of {model!r} must be in [0, 1], got {prior}")
        self.priors = {m: float(p) for m, p in priors.items()}
        self.models = tuple(self.priors)

    def score_batch(self, prompts: list[str]) -> list[tuple[dict[str, float], bool]]:
        return [(dict(self.priors), False) for _ in prompts]
