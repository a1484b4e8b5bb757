"""The predictor's feature row (Chimera 3.4): token counts, workflow state, model, prompt text."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FeatureRow:
    model: str
    workflow: str
    agent: str
    stage_index: int
    """1-based; 0 when unknown."""
    stage_count: int
    """0 when unknown."""
    system_prompt_tokens: int
    user_prompt_tokens: int
    input_tokens: int
    user_prompt: str


@dataclass(frozen=True)
class PredictItem:
    row: FeatureRow
    quantiles: tuple[float, ...]


@dataclass(frozen=True)
class LengthPrediction:
    median_tokens: float
    quantile_tokens: tuple[float, ...]
