"""The stack YAML's ``balancer.cascade`` section: the model types in cascade order, the thresholds
H = {h_1, ..., h_{C-1}} (Cascadia 3.3) and the judge that grades each stage's answer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

JUDGE_KINDS = ("llm", "learned")
SCORE_MAX = 100.0
"""Judge grades and thresholds are on a 0-100 scale (Cascadia's quality requirements: 80, 85, 90)."""


@dataclass(frozen=True)
class JudgeSpec:
    """``llm``: a model of the stack grades each answer with a scoring prompt and ``max_tokens`` output
    tokens (Cascadia footnote 4: 1-2 tokens), its time counted in the call's latency. ``learned``: a
    scorer trained on traces (Cascadia appendix N), loaded from ``artifact``."""

    kind: str = "llm"
    model: str = ""
    max_tokens: int = 2
    artifact: str = ""

    def __post_init__(self) -> None:
        if self.kind not in JUDGE_KINDS:
            raise ValueError(f"balancer.cascade.judge.kind must be one of {', '.join(JUDGE_KINDS)}, got {self.kind!r}")
        if self.kind == "llm" and not self.model:
            raise ValueError("balancer.cascade.judge.model is required for an llm judge (the model that grades)")
        if self.kind == "llm" and not 1 <= self.max_tokens <= 16:
            raise ValueError(f"balancer.cascade.judge.max_tokens must be in 1..16, got {self.max_tokens}")
        if self.kind == "learned" and not self.artifact:
            raise ValueError("balancer.cascade.judge.artifact is required for a learned judge "
                             "(train one with `hetflow train judge`)")

    @property
    def name(self) -> str:
        return f"llm:{self.model}" if self.kind == "llm" else "learned"


@dataclass(frozen=True)
class CascadeConfig:
    models: tuple[str, ...]
    """c_1, ..., c_C: the smallest model type first."""
    thresholds: tuple[float, ...]
    """h_1, ..., h_{C-1} on the judge's 0-100 scale: stage i's answer is accepted when its grade is at
    least h_i."""
    judge: JudgeSpec

    def __post_init__(self) -> None:
        if len(self.models) < 2:
            raise ValueError(f"balancer.cascade.models needs at least two model types, got {list(self.models)}")
        if len(set(self.models)) != len(self.models):
            raise ValueError(f"balancer.cascade.models names a model twice: {list(self.models)}")
        if len(self.thresholds) != len(self.models) - 1:
            raise ValueError(f"balancer.cascade.thresholds needs one threshold per model but the last "
                             f"({len(self.models) - 1}), got {len(self.thresholds)}")
        for i, h in enumerate(self.thresholds, 1):
            if not 0.0 <= h <= SCORE_MAX:  # also refuses NaN
                raise ValueError(f"balancer.cascade.thresholds: h_{i} must be in 0..{SCORE_MAX:g}, got {h}")

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> CascadeConfig:
        if not isinstance(raw, Mapping):
            raise ValueError(f"balancer.cascade must be a mapping (models, thresholds, judge), got {raw!r}")
        unknown = set(raw) - {"models", "thresholds", "judge"}
        if unknown:
            raise ValueError(f"balancer.cascade: unknown keys {sorted(unknown)} (models, thresholds, judge)")
        judge = raw.get("judge") or {}
        if not isinstance(judge, Mapping):
            raise ValueError("balancer.cascade.judge must be a mapping (kind, model, max_tokens, artifact), "
                             f"got {judge!r}")
        unknown = set(judge) - {"kind", "model", "max_tokens", "artifact"}
        if unknown:
            raise ValueError(f"balancer.cascade.judge: unknown keys {sorted(unknown)} "
                             "(kind, model, max_tokens, artifact)")
        return cls(models=tuple(str(m) for m in raw.get("models") or ()),
                   thresholds=tuple(float(h) for h in raw.get("thresholds") or ()),
                   judge=JudgeSpec(**dict(judge)))
