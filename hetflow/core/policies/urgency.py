"""Priority: HexGen-Flow's urgency (4.2, eq. 5-8).

When a call is dispatched, its SLO budget is the time left to its program's deadline times its share
of the remaining stages' mean cost (eq. 5-6), so an upstream overrun tightens every later budget
(figure 3). The engine serves the highest urgency U = t_comp - (budget - waited) (eq. 7-8); since all
waiting requests age at the same rate, that order is the fixed key ``enqueued + budget - t_comp``
(``cost.urgency_order_key``), which the engine's heap holds as an ordinary priority. Aging still
bounds starvation on top of it (Chimera 3.7).

A call without a deadline gets one when ``default_slo_scale`` is set: its program's start plus that
scale times the mean cost of its remaining stages, so among such calls the ones with less work left
are due sooner (shortest job first, bounded by how long they have waited). With the scale at 0 it gets
a budget of ``NO_DEADLINE_BUDGET_S``: served after every call with a deadline, by when it came less its
own predicted cost (the same key ``e + b - c``: a later call may pass an earlier one by up to the
difference of their costs).
"""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.cost import (
    remaining_stages_cost_s,
    slo_budget_s,
    stages_left,
    urgency_order_key,
)
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import Choice, Prediction, Priority, PriorityContext, PriorityRule

NO_DEADLINE_BUDGET_S = 1e6


@plugin("priority-rule", "urgency")
class Urgency(PriorityRule):

    def __init__(self, default_slo_scale: float = 0.0) -> None:
        if default_slo_scale < 0:
            raise ValueError("default_slo_scale must be >= 0")
        self.default_slo_scale = default_slo_scale

    def priority(self, call: LlmCall, prediction: Prediction, context: PriorityContext) -> tuple[Priority, Choice]:
        now, wf, snap = context.now_s, call.workflow, context.snapshot
        n_left = stages_left(wf.stage_index, wf.stage_count)
        this_cost = context.compute_cost_s                                                       # eq. 2
        mean_this = context.mean_cost_s                                                          # eq. 6
        later = snap.remaining_stage_costs_s[:n_left - 1]
        later = tuple(later) + (0.0,) * (n_left - 1 - len(later))  # stages the monitor has not seen
        mean_remaining = remaining_stages_cost_s(mean_this, later)                               # eq. 5's sum
        deadline, rule = wf.deadline_unix_s, "urgency:slo-budget"
        if not deadline and self.default_slo_scale:
            start = now if snap.program_start_s is None else snap.program_start_s
            deadline = start + self.default_slo_scale * mean_remaining
            rule = "urgency:default-slo"
        if not deadline:
            key = urgency_order_key(this_cost, NO_DEADLINE_BUDGET_S, now)
            return Priority(key), Choice(f"{key:.3f}", "urgency:no-deadline", scores={"t_comp_s": this_cost})
        budget = slo_budget_s(deadline - now, mean_this, mean_remaining)                        # eq. 5
        key = urgency_order_key(this_cost, budget, now)                                          # eq. 7-8
        return Priority(key), Choice(f"{key:.3f}", rule, scores={"t_comp_s": this_cost, "budget_s": budget,
                                                       "remaining_s": deadline - now, "stages_left": n_left,
                                                       "stages_cost_s": mean_remaining})
