"""HexGen-Flow's cost arithmetic (section 4.1-4.2), as pure functions over engine views.

Policies compose these: the workload-balanced engine score (eq. 2-4) and the SLO budget and urgency
of the local priority queue (eq. 5-8).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from hetflow.core.call import LlmCall
from hetflow.core.snapshot import EngineView

if TYPE_CHECKING:
    from hetflow.core.policies.contracts import Prediction

QUEUE_FLOOR_S = 1e-3
"""Smallest t_queue eq. 4 divides by: an idle engine scores (1 - alpha) * beta / 1 ms, not infinity."""


def compute_cost_s(engine: EngineView, input_tokens: int, output_tokens: float) -> float:
    """t_comp^m = t_prefill^m(L_in) + t_decode^m(L_out-hat) (HexGen-Flow eq. 2): the request alone on
    the engine's timing profile; without a profile, the quoted decode time per token."""
    tokens_out = max(1, round(output_tokens))
    if engine.profile is None:
        return tokens_out * engine.decode_ms_per_token / 1e3
    return engine.profile.isolated_request_s(max(1, input_tokens), tokens_out)


def mean_compute_cost_s(engines: Sequence[EngineView], input_tokens: int, output_tokens: float) -> float:
    """t-bar_comp = (1/N) sum_m t_comp^m over all N instances (HexGen-Flow eq. 6)."""
    if not engines:
        raise ValueError("eq. 6 needs at least one engine")
    return sum(compute_cost_s(e, input_tokens, output_tokens) for e in engines) / len(engines)


def slo_budget_s(remaining_s: float, this_cost_s: float, remaining_costs_s: float) -> float:
    """t^SLO_ij = (T^SLO_i - tau^i_elapsed) * t-bar_ij / sum_{k=j..n_i} t-bar_ik (HexGen-Flow eq. 5).

    ``remaining_s`` is T^SLO_i - tau^i_elapsed, the time left to the program's deadline when the call
    is dispatched, so an upstream overrun shrinks every later budget (figure 3). It may be negative
    (the deadline has passed): the budget is then negative too and the call maximally urgent.
    """
    if remaining_costs_s <= 0:
        raise ValueError("the remaining stages' cost must be positive")
    return remaining_s * this_cost_s / remaining_costs_s


def remaining_stages_cost_s(this_mean_s: float, later_stage_costs_s: Sequence[float]) -> float:
    """sum_{k=j..n_i} t-bar_comp_{i,k}, the denominator of eq. 5: this stage's eq. 6 cost plus each later
    stage's mean cost learned from earlier runs of the workflow (a stage not seen yet counts as this
    one), so later, costlier stages take their share of the time left."""
    return this_mean_s + sum(c if c > 0.0 else this_mean_s for c in later_stage_costs_s)


def urgency_s(compute_cost_s: float, budget_s: float, waited_s: float) -> float:
    """U_ij = t^m_comp - (t^SLO_ij - tau_ij) (HexGen-Flow eq. 7); higher is more at risk."""
    return compute_cost_s - (budget_s - waited_s)


def urgency_order_key(compute_cost_s: float, budget_s: float, enqueued_s: float) -> float:
    """A time-invariant key whose minimum is eq. 8's argmax of urgency.

    U_ij(t) = c - b + (t - e) for a request enqueued at e, so every waiting request's urgency grows at
    the same rate and their order never changes while they wait: ranking by U at time t equals ranking
    by e + b - c (the latest start that still meets the budget) ascending, at every t. The engine's
    heap keeps it as an ordinary priority, O(log n) per operation.
    """
    return enqueued_s + budget_s - compute_cost_s


def workload_balanced_score(queue_s: float, compute_s: float, alpha: float, beta: float) -> float:
    """Score(q, m) = (1 - alpha) * beta / t_queue^m - alpha * t_comp^m (HexGen-Flow eq. 4); highest wins."""
    return (1 - alpha) * beta / max(queue_s, QUEUE_FLOOR_S) - alpha * compute_s


def stages_left(stage_index: int, stage_count: int) -> int:
    """n_i - j + 1: this stage and the ones after it; 1 when the client did not say."""
    return stage_count - stage_index + 1 if 0 < stage_index <= stage_count else 1


def call_output_tokens(call: LlmCall, prediction: Prediction | None) -> float:
    """L_out-hat of one call from a workflow-level prediction: the remaining tokens split evenly over
    the remaining stages (its max_tokens without a prediction). A baseline: Chimera's predictor
    estimates the workflow's remaining output, HexGen-Flow's eq. 2 wants the call's. Never more than
    the call's max_tokens: no engine generates more."""
    if prediction is None:
        return float(call.sampling.max_tokens)
    wf = call.workflow
    return min(float(call.sampling.max_tokens), prediction.median_tokens / stages_left(wf.stage_index, wf.stage_count))
