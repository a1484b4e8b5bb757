"""The predictor's feature row (Chimera 3.4): token counts, workflow state, model, prompt text."""

from __future__ import annotations

from dataclasses import dataclass

from hetflow.core.call import LlmCall


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


def feature_row(call: LlmCall, model: str) -> FeatureRow:
    """Chimera 3.4's features of ``call`` if it runs on ``model``."""
    wf = call.workflow
    return FeatureRow(model=model, workflow=wf.workflow, agent=wf.agent, stage_index=wf.stage_index,
                      stage_count=wf.stage_count, system_prompt_tokens=call.system_prompt_tokens,
                      user_prompt_tokens=call.user_prompt_tokens, input_tokens=call.input_tokens,
                      user_prompt=call.user_prompt)
