"""Priority: HexGen-Flow's urgency (4.2, eq. 5-8).

When a call is dispatched, its SLO budget is the time left to its program's deadline times its share
of the remaining stages' mean cost (eq. 5-6), so an upstream overrun tightens every later budget
(figure 3). The engine serves the highest urgency U = t_comp - (budget - waited) (eq. 7-8); since all
waiting requests age at the same rate, that order is the fixed key ``enqueued + budget - t_comp``
(``cost.urgency_order_key``), which the engine's heap holds as an ordinary priority. Aging still
bounds starvation on top of it (Chimera 3.7).

A call without a deadline gets ``default_slo_s`` from its arrival, or, when that is 0, a budget of
``NO_DEADLINE_BUDGET_S``: served after every call with a deadline, first come first served.
"""

from __future__ import annotations

from balancer_svc.call import LlmCall
from balancer_svc.cost import (call_output_tokens, compute_cost_s, mean_compute_cost_s, slo_budget_s, stages_left,
                               urgency_order_key)
from balancer_svc.policies import Choice, Prediction, PriorityContext, register

NO_DEADLINE_BUDGET_S = 1e6


@register("priority", "urgency")
class Urgency:
    prediction_target = "workflow"

    def __init__(self, default_slo_s: float = 0.0) -> None:
        if default_slo_s < 0:
            raise ValueError("default_slo_s must be >= 0")
        self.default_slo_s = default_slo_s

    def priority(self, call: LlmCall, prediction: Prediction, context: PriorityContext | None = None
                 ) -> tuple[float, Choice]:
        if context is None:
            raise ValueError("urgency needs the chosen engine and the time (a PriorityContext)")
        now, wf = context.now_s, call.workflow
        deadline = wf.deadline_unix_s or (call.received_unix_s + self.default_slo_s if self.default_slo_s else 0.0)
        n_left = stages_left(wf.stage_index, wf.stage_count)
        output = call_output_tokens(prediction.median_tokens, n_left)
        this_cost = compute_cost_s(context.engine, call.input_tokens, output)
        if not deadline:
            key = urgency_order_key(this_cost, NO_DEADLINE_BUDGET_S, now)
            return key, Choice(f"{key:.3f}", "urgency:no-deadline", scores={"t_comp_s": this_cost})
        pool = context.snapshot.engines
        mean_this = mean_compute_cost_s(pool, call.input_tokens, output)                         # eq. 6
        mean_remaining = mean_this * n_left  # later stages estimated alike: same input, an even share of y-hat
        budget = slo_budget_s(deadline - now, mean_this, mean_remaining)                        # eq. 5
        key = urgency_order_key(this_cost, budget, now)                                          # eq. 7-8
        return key, Choice(f"{key:.3f}", "urgency:slo-budget",
                           scores={"t_comp_s": this_cost, "budget_s": budget, "remaining_s": deadline - now,
                                   "stages_left": n_left})
