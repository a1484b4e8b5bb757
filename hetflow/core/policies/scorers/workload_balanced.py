"""Scorer: HexGen-Flow's workload-balanced score (4.1, eq. 4), normalised over the candidates.

Score = (1 - alpha) * beta / t_queue - alpha * t_comp (eq. 2-4), then ``(S - min) / (max - min)`` so it
adds to the other scorers' [0, 1] (1 for all when equal). alpha is read from the policy store, where
the tuner (4.3) writes it; ``alpha`` here is where it starts.
"""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.cost import call_output_tokens, compute_cost_s, workload_balanced_score
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import EngineScorer, PolicyStore, Prediction, min_max_scores
from hetflow.core.snapshot import ClusterSnapshot, EngineView


@plugin("engine-scorer", "workload-balanced")
class WorkloadBalancedScorer(EngineScorer):
    def __init__(self, alpha: float = 0.0, beta: float = 1.0) -> None:
        if not 0.0 <= alpha <= 1.0 or beta <= 0:
            raise ValueError(f"workload-balanced needs 0 <= alpha <= 1 and beta > 0, got {alpha}, {beta}")
        self.alpha, self.beta = alpha, beta
        self.initial_alpha = alpha

    def score(self, call: LlmCall, engines: list[EngineView], snapshot: ClusterSnapshot, prediction: Prediction,
              store: PolicyStore) -> dict[str, float]:
        alpha = store.alpha if store.alpha is not None else self.alpha
        output = call_output_tokens(call, prediction)
        raw = {e.engine_id: workload_balanced_score(e.in_flight_cost_s, compute_cost_s(e, call.input_tokens, output),
                                                    alpha, self.beta) for e in engines}
        return min_max_scores(raw, lower_is_better=False)
