"""Engine choice: the healthy engine of the chosen model with the fewest in-flight predicted tokens
(Chimera 3.2: the monitor's I[engine] sums). Ties: fewer in-flight requests, then engine id."""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import Choice, EnginePicker, PolicyStore, Prediction, healthy_or_unavailable
from hetflow.core.snapshot import ClusterSnapshot


@plugin("engine-picker", "least-inflight-tokens")
class LeastInflightTokens(EnginePicker):
    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, model: str, prediction: Prediction,
             store: PolicyStore) -> Choice:
        engines = healthy_or_unavailable(snapshot, model)
        best = min(engines, key=lambda e: (e.in_flight_tokens, e.in_flight_requests, e.engine_id))
        return Choice(best.engine_id, "fewest-in-flight-tokens",
                      loads={e.engine_id: e.in_flight_tokens for e in engines})
