"""Scorer: the engine's predicted in-flight tokens, fewest best.

Chimera 3.5's load signal I[m] (the monitor's sum of predicted tokens of the calls in flight on the
engine, over every balancer), normalised over the candidates as the queue scorer is: ``(max - I) /
(max - min)``, 1 for all when equal. Unlike a reported queue it counts what was dispatched a moment
ago and weighs long calls more than short ones.
"""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import EngineScorer, PolicyStore, Prediction, min_max_scores
from hetflow.core.snapshot import ClusterSnapshot, EngineView


@plugin("engine-scorer", "in-flight-tokens")
class InFlightTokens(EngineScorer):
    def score(self, call: LlmCall, engines: list[EngineView], snapshot: ClusterSnapshot, prediction: Prediction,
              store: PolicyStore) -> dict[str, float]:
        return min_max_scores({e.engine_id: e.in_flight_tokens for e in engines})
