"""What the simulated balancer is told in place of router_svc and predictor_svc.

Confidence: ``prior`` (a fixed prior per model: Chimera's without-router ablation) or ``oracle``
(the trace's per-model correctness: Chimera's oracle router, 4.4). Prediction: ``oracle`` (the true
remaining tokens for that model: vLLM(STJF) and Chimera's oracle predictor) or ``input-length``
(Chimera table 3's proxy). Learned artifacts plug in here too (issue 4).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from balancer_svc.policies import Prediction
from hetflow.workloads.trace import StageRecord, remaining_output_tokens


@dataclass(frozen=True)
class Signals:
    confidence: str = "prior"
    prediction: str = "oracle"
    priors: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.confidence not in ("prior", "oracle") or self.prediction not in ("oracle", "oracle-own", "input-length"):
            raise ValueError(f"unknown signals {self.confidence!r}/{self.prediction!r}")

    def confidence_for(self, record: StageRecord, models: list[str]) -> dict[str, float]:
        if self.confidence == "oracle":
            return {m: float(record.correct[m]) for m in models}
        return {m: float(self.priors.get(m, 0.5)) for m in models}

    def prediction_for(self, program: list[StageRecord], record: StageRecord, model: str) -> Prediction:
        if self.prediction == "oracle":
            return Prediction(float(remaining_output_tokens(program, record.stage_index, model)))
        if self.prediction == "oracle-own":  # LTR-style: the call's own length, no workflow awareness
            return Prediction(float(record.output_tokens[model]))
        return Prediction(float(record.input_tokens[model]))
