"""Engine choice: HexGen-Flow's workload-balanced dispatch (4.1, eq. 2-4).

Among the chosen model's healthy engines, the highest Score = (1 - alpha) * beta / t_queue - alpha *
t_comp, where t_comp is the call's execution cost on the engine (eq. 2, from its timing profile) and
t_queue the summed cost of what the engine already holds (eq. 3, the monitor's in-flight cost).
alpha = 0 balances queues only, alpha = 1 picks the fastest engine; the configured alpha is where the
policy store starts, and the tuner (4.3) moves the store's.
"""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.cost import call_output_tokens, compute_cost_s, workload_balanced_score
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import Choice, EnginePicker, PolicyStore, Prediction, healthy_or_unavailable
from hetflow.core.snapshot import ClusterSnapshot


@plugin("engine-picker", "workload-balanced")
class WorkloadBalanced(EnginePicker):
    def __init__(self, alpha: float = 0.0, beta: float = 1.0) -> None:
        if not 0.0 <= alpha <= 1.0 or beta <= 0:
            raise ValueError(f"workload-balanced needs 0 <= alpha <= 1 and beta > 0, got {alpha}, {beta}")
        self.initial_alpha, self.beta = alpha, beta  # alpha starts at 0 (4.3, initialization); beta fixed by trial

    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, model: str, prediction: Prediction,
             store: PolicyStore) -> Choice:
        engines = healthy_or_unavailable(snapshot, model)
        if store.alpha is None:
            raise ValueError("workload-balanced reads alpha from the policy store, which has none")
        alpha = store.alpha
        output = call_output_tokens(call, prediction)
        comp = {e.engine_id: compute_cost_s(e, call.input_tokens, output) for e in engines}
        scores = {e.engine_id: workload_balanced_score(e.in_flight_cost_s, comp[e.engine_id], alpha, self.beta)
                  for e in engines}
        best = max(engines, key=lambda e: (scores[e.engine_id], -comp[e.engine_id], e.engine_id))
        return Choice(best.engine_id, "hexgen:workload-balanced", scores=scores,
                      loads={e.engine_id: e.in_flight_cost_s for e in engines},
                      params={"alpha": alpha, "beta": self.beta, "t_comp_s": comp[best.engine_id]})
