"""Engine choice: the healthy engine of the chosen model with the fewest in-flight predicted tokens
(Chimera 3.2: the monitor's I[engine] sums). Ties: fewer in-flight requests, then engine id."""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.errors import Unavailable
from hetflow.core.policies import Choice, Prediction, register
from hetflow.core.snapshot import ClusterSnapshot


@register("engine", "least-inflight-tokens")
class LeastInflightTokens:
    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, model: str, prediction: Prediction | None = None
             ) -> Choice:
        engines = snapshot.healthy_engines(model)
        if not engines:
            raise Unavailable(f"no healthy engine for model {model!r}")
        best = min(engines, key=lambda e: (e.in_flight_tokens, e.in_flight_requests, e.engine_id))
        return Choice(best.engine_id, "fewest-in-flight-tokens",
                      loads={e.engine_id: e.in_flight_tokens for e in engines})
