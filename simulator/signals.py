"""What the simulated balancer is told in place of router_svc and predictor_svc.

Confidence: ``prior`` (a fixed prior per model: Chimera's without-router ablation), ``oracle`` (the
trace's per-model correctness: Chimera's oracle router, 4.4), ``probability`` (the probability each
outcome was drawn with: the best any router could know), ``visible-probability`` (the same from what the
prompt shows of the item's difficulty: the ceiling of a router that reads the text), ``learned`` (a
router artifact's scores, computed once per trace) or ``learned-one-difficulty`` (the same read through
one difficulty per prompt, ``hetflow.core.confidence``, as the served router does with ``reading:
one-difficulty``). Prediction: ``oracle`` (the true length: of the rest of the
workflow, vLLM(STJF) and Chimera's oracle predictor; or of the call alone, LTR's upper bound),
``input-length`` (Chimera table 3's proxy) or ``learned`` (a QRF artifact's median).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

from hetflow.core.confidence import one_difficulty
from hetflow.core.policies.contracts import Prediction
from hetflow.core.presets import Preset
from hetflow.core.trace import StageRecord, remaining_output_tokens

CONFIDENCE_SOURCES = ("prior", "oracle", "probability", "visible-probability", "learned", "learned-one-difficulty")
PROBABILITY_FIELDS = {"probability": "solve_probability", "visible-probability": "visible_solve_probability"}
"""The probability oracles and the trace field each reads."""
UPPER_QUANTILE = 0.9
"""The upper quantile the learned predictor gives beside its median (balancer_svc's default quantiles
are 0.1 and 0.9)."""
PREDICTION_SOURCES = ("oracle", "input-length", "learned")


@dataclass(frozen=True)
class LearnedSignals:
    """Router and predictor outputs for every (program, stage[, model]) of one trace."""

    confidence: Mapping[tuple[str, int], Mapping[str, float]] = field(default_factory=dict)
    median_tokens: Mapping[tuple[str, int, str], float] = field(default_factory=dict)
    upper_tokens: Mapping[tuple[str, int, str], float] = field(default_factory=dict)
    """The predictor's ``UPPER_QUANTILE`` of the same, as the balancer asks for it (its default quantiles)."""
    abilities: Mapping[str, float] = field(default_factory=dict)
    """Each model's ability as the router artifact gives it (``hetflow.core.confidence.abilities_from_rates``
    of its training label rates): what ``learned-one-difficulty`` reads the confidences with."""


@dataclass(frozen=True)
class Signals:
    confidence: str = "prior"
    prediction: str = "oracle"
    priors: Mapping[str, float] = field(default_factory=dict)
    learned: LearnedSignals = field(default_factory=LearnedSignals)

    def __post_init__(self) -> None:
        if self.confidence not in CONFIDENCE_SOURCES or self.prediction not in PREDICTION_SOURCES:
            raise ValueError(f"unknown signals {self.confidence!r}/{self.prediction!r}")

    def confidence_for(self, record: StageRecord, models: list[str]) -> dict[str, float]:
        if self.confidence == "oracle":
            return {m: float(record.correct.get(m, False)) for m in models}
        if self.confidence in PROBABILITY_FIELDS:
            probabilities = getattr(record, PROBABILITY_FIELDS[self.confidence])
            if not probabilities:
                raise ValueError(f"the {self.confidence} oracle needs a trace from the workload's item-response "
                                 f"model; program {record.program_id} has none")
            return {m: float(probabilities[m]) for m in models}
        if self.confidence in ("learned", "learned-one-difficulty"):
            scores = self.learned.confidence[(record.program_id, record.stage_index)]
            asked = {m: float(scores[m]) for m in models}
            return asked if self.confidence == "learned" else one_difficulty(asked, self.learned.abilities)
        return {m: float(self.priors.get(m, 0.5)) for m in models}

    def prediction_for(self, program: list[StageRecord], record: StageRecord, model: str,
                       target: str = "workflow") -> Prediction:
        """``target``: ``workflow`` (total remaining output tokens) or ``call`` (the call's own)."""
        if self.prediction == "oracle":
            if target == "call":
                return Prediction(float(record.output_tokens[model]))
            return Prediction(float(remaining_output_tokens(program, record.stage_index, model)))
        if self.prediction == "learned":
            if target == "call":
                raise ValueError("the learned predictor estimates remaining workflow tokens, not one call's")
            key = (record.program_id, record.stage_index, model)
            upper = self.learned.upper_tokens.get(key)
            return Prediction(self.learned.median_tokens[key], {UPPER_QUANTILE: upper} if upper is not None else {})
        return Prediction(float(record.input_tokens[model]))


def signals_for(preset: Preset, signals: Signals) -> Signals:
    """The run's signals as ``preset`` uses them: fixed priors for the without-router ablation, the trace's
    answers for the oracle routers, the learned router read through one difficulty where the preset reads
    it so, true lengths for the oracle predictors."""
    if preset.confidence == "router-one-difficulty":
        if signals.confidence == "learned":        # fixed priors read so are themselves; oracles are not read
            signals = replace(signals, confidence="learned-one-difficulty")
    elif preset.confidence != "router":
        signals = replace(signals, confidence=preset.confidence)
    if preset.prediction == "oracle":
        signals = replace(signals, prediction="oracle")
    return signals
