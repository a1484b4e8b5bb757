"""Balancer policies: small pure functions over a typed snapshot, one per file, chosen by name.

Three stages, run in this order, each a plugin type (STYLE.md; Gateway API Inference Extension's
endpoint picker):
  model choice   ModelPicker     (call, snapshot, confidence)          -> Choice
  engine choice  EnginePicker    (call, snapshot, model, prediction)   -> Choice
  priority       PriorityRule    (call, prediction, context)           -> (priority, Choice)
Each result carries the numbers it decided on and the rule that decided, for the receipt.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol

from hetflow.core.call import LlmCall
from hetflow.core.snapshot import ClusterSnapshot, EngineView


@dataclass(frozen=True)
class Choice:
    chosen: str
    rule: str
    scores: Mapping[str, float] = field(default_factory=dict)
    loads: Mapping[str, float] = field(default_factory=dict)
    params: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Prediction:
    median_tokens: float
    quantile_tokens: Mapping[float, float] = field(default_factory=dict)


@dataclass(frozen=True)
class PriorityContext:
    """What a priority rule may read besides the call: the time of the decision, the engine the call
    goes to and the cluster (HexGen-Flow's urgency needs all three)."""

    now_s: float
    engine: EngineView
    snapshot: ClusterSnapshot


class WaitForCapacity(Exception):
    """No engine can take the call now, but one will: the caller holds the call and decides again
    after ``retry_after_s`` (Kairos 6: the request stays in the scheduling queue)."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ModelPicker(Protocol):
    type_name: str
    needs_router: bool
    program_affinity: bool
    """Whether a program keeps the model of its first call (Chimera Algorithm 1, line 2)."""

    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, confidence: Mapping[str, float]) -> Choice: ...


class PriorityRule(Protocol):
    type_name: str
    prediction_target: str
    """What the prediction it reads estimates: ``workflow`` (total remaining tokens) or ``call`` (its own)."""

    def priority(self, call: LlmCall, prediction: Prediction, context: PriorityContext | None = None
                 ) -> tuple[float, Choice]: ...


class EnginePicker(Protocol):
    type_name: str

    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, model: str, prediction: Prediction | None = None
             ) -> Choice: ...


_REGISTRY: dict[str, dict[str, Callable[..., Any]]] = {"model": {}, "priority": {}, "engine": {}}


def register(stage: str, type_name: str) -> Callable[[type], type]:
    def add(cls: type) -> type:
        cls.type_name = type_name  # type: ignore[attr-defined]
        _REGISTRY[stage][type_name] = cls
        return cls

    return add


def build(stage: str, type_name: str, params: Mapping[str, Any]) -> Any:
    from hetflow.core.policies import (  # noqa: F401
        agent_priority,
        chimera_slack,
        fcfs,
        join_shortest_queue,
        least_inflight_tokens,
        least_load,
        memory_packer,
        predicted_call_tokens,
        predicted_total_tokens,
        round_robin,
        urgency,
        workload_balanced,
    )

    if type_name not in _REGISTRY[stage]:
        raise ValueError(f"unknown {stage} policy {type_name!r}; known: {sorted(_REGISTRY[stage])}")
    return _REGISTRY[stage][type_name](**params)
