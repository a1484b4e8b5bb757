"""vLLM's data-parallel load balancer, as vLLM 0.32 implements it (``DPLBAsyncMPClient.
get_core_engine_for_request`` in ``vllm/v1/engine/core_client.py``): a baseline with no model routing
and no program affinity.

Per engine, the load is the larger of the requests in flight there and its waiting + running, plus a
penalty on a queue that forms under KV pressure: ``waiting * 6 * max(0, kv_cache_usage - 0.5)`` (from 0
at half-full KV to 3x waiting when full). ``waiting`` is the engine's last report plus the calls
dispatched to it since (vLLM adds its own picks to the waiting count between the coordinator's stats
updates). Engines are scanned in id order from a start that rotates by one per decision, and the
first with the lowest load wins, so ties spread round robin.

The in-flight count is the monitor's, over every balancer: vLLM scales one client's count by the
number of clients to estimate the same thing.
"""

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
from hetflow.core.snapshot import ClusterSnapshot, EngineView

KV_PRESSURE_FROM = 0.5
"""KV usage above which waiting requests are penalised (vLLM 0.32)."""
KV_PRESSURE_WEIGHT = 6.0
"""Penalty per waiting request per unit of KV usage above ``KV_PRESSURE_FROM`` (vLLM 0.32)."""


def vllm_load(e: EngineView) -> float:
    """vLLM 0.32's score of one engine (lower is less loaded)."""
    waiting = e.waiting + e.dispatched_since_report
    score = float(max(e.in_flight_requests, waiting + e.running))
    if waiting:
        score += waiting * KV_PRESSURE_WEIGHT * max(0.0, e.kv_cache_usage - KV_PRESSURE_FROM)
    return score


def least_loaded(engines: list[EngineView], store: PolicyStore, rotation: str) -> Choice:
    """The first engine of lowest load, scanning in id order from the rotating start."""
    ordered = sorted(engines, key=lambda e: e.engine_id)
    start = store.next_turn(rotation) % len(ordered)
    loads = {e.engine_id: vllm_load(e) for e in ordered}
    scan = ordered[start:] + ordered[:start]
    best = min(scan, key=lambda e: loads[e.engine_id])  # min keeps the first of equal loads
    return Choice(best.engine_id, "vllm-least-load", loads=loads, params={"scan_start": float(start)})


@plugin("model-picker", "least-load")
class LeastLoadModel(ModelPicker):
    """Model stage: the model of the least-loaded engine of the whole pool."""

    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, confidence: Mapping[str, float],
             predictions: Mapping[str, Prediction], store: PolicyStore) -> Choice:
        engines = healthy_or_unavailable(snapshot)
        choice = least_loaded(engines, store, "least-load")
        model = next(e.model for e in engines if e.engine_id == choice.chosen)
        return Choice(model, "vllm-least-load:engine-first", loads=choice.loads, params=choice.params)


@plugin("engine-picker", "least-load")
class LeastLoadEngine(EnginePicker):
    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, model: str, prediction: Prediction,
             store: PolicyStore) -> Choice:
        return least_loaded(healthy_or_unavailable(snapshot, model), store, f"least-load:{model}")
