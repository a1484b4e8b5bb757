"""Baseline: the same confidence for every prompt, one fixed prior per model.

This is Chimera's "without router" ablation (4.4, figure 6): the slack rule then always prefers the
model with the higher prior when its latency allows, with no per-query signal.
"""

from __future__ import annotations

from typing import Mapping

from hetflow.core.confidence import check_reading


class FixedPriorScorer:
    def __init__(self, models: Mapping[str, float], reading: str = "one-difficulty") -> None:
        """``models``: each model with the confidence returned for every prompt. ``reading``: accepted as the
        learned router's is, and the same either way: the priors are the scorer's abilities (theta_m =
        logit prior_m), so the one difficulty of every prompt is 0 and reading through it gives the priors
        back (``hetflow.core.confidence.one_difficulty``)."""
        check_reading(reading)
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
