"""Round robin over the pool's healthy engines: a baseline with no load or model awareness. The turn
is the store's, so the policy itself holds nothing."""

from __future__ import annotations

from typing import Mapping

from hetflow.core.call import LlmCall
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import (
    Choice,
    EnginePicker,
    ModelPicker,
    PolicyStore,
    Prediction,
    healthy_or_unavailable,
)
from hetflow.core.snapshot import ClusterSnapshot


def next_in_turn(engine_ids: list[str], store: PolicyStore, rotation: str) -> str:
    return sorted(engine_ids)[store.next_turn(rotation) % len(engine_ids)]


@plugin("model-picker", "round-robin")
class RoundRobinModel(ModelPicker):
    """Model stage: the model of the next engine in turn over the whole pool."""

    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, confidence: Mapping[str, float],
             predictions: Mapping[str, Prediction], store: PolicyStore) -> Choice:
        engines = healthy_or_unavailable(snapshot)
        engine_id = next_in_turn([e.engine_id for e in engines], store, "round-robin")
        return Choice(next(e.model for e in engines if e.engine_id == engine_id), f"round-robin:{engine_id}")


@plugin("engine-picker", "round-robin")
class RoundRobinEngine(EnginePicker):
    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, model: str, prediction: Prediction,
             store: PolicyStore) -> Choice:
        engines = healthy_or_unavailable(snapshot, model)
        return Choice(next_in_turn([e.engine_id for e in engines], store, f"round-robin:{model}"), "round-robin")
