"""Join the shortest queue by work (load-balancer paper, C.3.1): "each arriving request is routed to the
model with the least number of prompt and decode tokens yet to be processed": the engine's prompt tokens
not yet prefilled plus the decode tokens its in-flight calls are predicted to produce (the monitor's
I[m]). A baseline of issue 16. Ties: engine id."""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import Choice, EnginePicker, PolicyStore, Prediction, healthy_or_unavailable
from hetflow.core.snapshot import ClusterSnapshot


@plugin("engine-picker", "work-left-tokens")
class WorkLeftTokens(EnginePicker):
    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, model: str, prediction: Prediction,
             store: PolicyStore) -> Choice:
        engines = healthy_or_unavailable(snapshot, model)
        loads = {e.engine_id: float(e.pending_prefill_tokens) + e.in_flight_tokens for e in engines}
        best = min(engines, key=lambda e: (loads[e.engine_id], e.engine_id))
        return Choice(best.engine_id, "fewest-tokens-left", loads=loads)
