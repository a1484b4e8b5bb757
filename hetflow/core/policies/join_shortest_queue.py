"""Join the shortest queue (JSQ): each request goes to the engine with the fewest outstanding
requests, waiting or running, as the monitor counts them (current, unlike the engines' 0.5 s reports).
A baseline: no model routing, no program affinity; the model is whichever that engine serves.
Ties: engine id."""

from __future__ import annotations

from typing import Mapping

from hetflow.core.call import LlmCall
from hetflow.core.errors import Unavailable
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import (
    Choice,
    EnginePicker,
    ModelPicker,
    PolicyStore,
    Prediction,
    healthy_or_unavailable,
)
from hetflow.core.snapshot import ClusterSnapshot, EngineView


def shortest_queue(engines: list[EngineView]) -> Choice:
    if not engines:
        raise Unavailable("no healthy engine")
    loads = {e.engine_id: float(max(e.in_flight_requests, e.waiting + e.running)) for e in engines}
    best = min(engines, key=lambda e: (loads[e.engine_id], e.engine_id))
    return Choice(best.engine_id, "join-shortest-queue", loads=loads)


@plugin("model-picker", "join-shortest-queue")
class ShortestQueueModel(ModelPicker):
    """Model stage: the model of the pool's engine with the fewest outstanding requests."""


    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, confidence: Mapping[str, float],
             predictions: Mapping[str, Prediction], store: PolicyStore) -> Choice:
        choice = shortest_queue(snapshot.healthy_engines())
        model = next(e.model for e in snapshot.engines if e.engine_id == choice.chosen)
        return Choice(model, "join-shortest-queue:engine-first", loads=choice.loads)


@plugin("engine-picker", "join-shortest-queue")
class ShortestQueueEngine(EnginePicker):
    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, model: str, prediction: Prediction,
             store: PolicyStore) -> Choice:
        engines = healthy_or_unavailable(snapshot, model)
        return shortest_queue(engines)
