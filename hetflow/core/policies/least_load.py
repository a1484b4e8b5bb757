"""vLLM's load balancer, as Chimera 4.2 describes it: each request goes to the engine with the lowest
weighted sum of waiting and running requests. A baseline: no model routing, no program affinity; the
model is whichever the least-loaded engine serves.

Engine reports lag (every 0.5 s); the monitor's in-flight count is current, so a request counts as
waiting when the monitor knows it and the engine has not reported it running yet.
"""

from __future__ import annotations

from typing import Mapping

from hetflow.core.call import LlmCall
from hetflow.core.errors import Unavailable
from hetflow.core.policies import Choice, Prediction, register
from hetflow.core.snapshot import ClusterSnapshot, EngineView


def load_score(e: EngineView, waiting_weight: float, running_weight: float) -> float:
    waiting = max(e.waiting, e.in_flight_requests - e.running)
    return waiting_weight * waiting + running_weight * e.running


def least_loaded(engines: list[EngineView], waiting_weight: float, running_weight: float) -> Choice:
    if not engines:
        raise Unavailable("no healthy engine")
    loads = {e.engine_id: load_score(e, waiting_weight, running_weight) for e in engines}
    best = min(engines, key=lambda e: (loads[e.engine_id], e.engine_id))
    return Choice(best.engine_id, "least-load", loads=loads,
                  params={"waiting_weight": waiting_weight, "running_weight": running_weight})


@register("model", "least-load")
class LeastLoadModel:
    """Model stage: the model of the least-loaded engine of the whole pool."""

    needs_router = False
    program_affinity = False

    def __init__(self, waiting_weight: float = 1.0, running_weight: float = 1.0) -> None:
        self.waiting_weight, self.running_weight = waiting_weight, running_weight

    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, confidence: Mapping[str, float]) -> Choice:
        choice = least_loaded(snapshot.healthy_engines(), self.waiting_weight, self.running_weight)
        model = next(e.model for e in snapshot.engines if e.engine_id == choice.chosen)
        return Choice(model, "least-load:engine-first", loads=choice.loads, params=choice.params)


@register("engine", "least-load")
class LeastLoadEngine:
    def __init__(self, waiting_weight: float = 1.0, running_weight: float = 1.0) -> None:
        self.waiting_weight, self.running_weight = waiting_weight, running_weight

    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, model: str, prediction: Prediction | None = None
             ) -> Choice:
        engines = snapshot.healthy_engines(model)
        if not engines:
            raise Unavailable(f"no healthy engine for model {model!r}")
        return least_loaded(engines, self.waiting_weight, self.running_weight)
