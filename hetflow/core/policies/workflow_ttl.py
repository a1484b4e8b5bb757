"""Retention: keep a program's KV across its tool call for as long as Continuum's utility says it pays
(arXiv 2511.02230; ``hetflow.core.kv_retention``), with what only hetflow knows of the program.

    U(d) = P(T < d) C - w (E[T; T < d] + d P(T >= d)),   d in [0, min(max_hold_s, C / w)]

- No hold after the program's last stage: nothing will read the KV again (vLLM's router learns that only
  from a client's ``expected_resume: false``).
- ``T``: the call's agent's tool gaps in its workflow, log-normal, from its first observed gap on
  (``hetflow.core.monitor.tool_gaps``; vLLM's router waits for 100 gaps per rank); one gap alone gets
  ``single_gap_sigma``.
- ``C``: the seconds recomputing the context (prompt plus predicted output) would take on the chosen
  engine, from its profile.
- ``w``: what a second of held room costs the calls behind it: 1 while calls wait at the engine
  (Continuum's and the router's weight), else the share of the engine's free KV the context takes (at
  most 1): room nobody asks for costs little, room the next arrivals need costs as much as a queue.
"""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.kv_retention import LogNormalFit, best_hold_s
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import Choice, PriorityContext, RetentionRule


@plugin("retention-rule", "workflow-ttl")
class WorkflowTtl(RetentionRule):
    def __init__(self, max_hold_s: float = 30.0, single_gap_sigma: float = 1.0, busy_hold_cost: float = 1.0) -> None:
        """``max_hold_s``: the longest hold (the agent family's tool calls last up to 30 s);
        ``busy_hold_cost``: ``w`` while calls wait at the engine."""
        if max_hold_s < 0 or single_gap_sigma <= 0 or busy_hold_cost <= 0:
            raise ValueError("max_hold_s must be >= 0; single_gap_sigma and busy_hold_cost > 0")
        self.max_hold_s, self.single_gap_sigma, self.busy_hold_cost = max_hold_s, single_gap_sigma, busy_hold_cost

    def hold_s(self, call: LlmCall, context: PriorityContext) -> tuple[float, Choice]:
        workflow = call.workflow
        if workflow.stage_count and workflow.stage_index >= workflow.stage_count:
            return 0.0, Choice("0", "last-stage")
        fit = context.snapshot.agent_tool_gap
        engine = context.engine
        if fit is None or engine.profile is None:
            return 0.0, Choice("0", "no-tool-gap-seen" if fit is None else "no-profile")
        if fit.samples == 1:
            fit = LogNormalFit(fit.mu, self.single_gap_sigma, 1)
        context_tokens = call.input_tokens + int(round(context.output_tokens))
        miss_impact_s = engine.profile.isolated_request_s(context_tokens, 1)
        free_tokens = (1.0 - engine.kv_cache_usage) * engine.kv_capacity_tokens
        free_share = min(1.0, context_tokens / free_tokens) if free_tokens > 0 else 1.0
        hold_cost = self.busy_hold_cost if engine.waiting > 0 else free_share
        if hold_cost <= 0:  # an empty context on an idle engine: nothing to keep
            return 0.0, Choice("0", "no-context")
        hold_s, utility_s = best_hold_s(fit, miss_impact_s, min(self.max_hold_s, miss_impact_s / hold_cost), hold_cost)
        params = {"gap_mu": fit.mu, "gap_sigma": fit.sigma, "gap_samples": fit.samples,
                  "miss_impact_s": miss_impact_s, "hold_cost": hold_cost, "utility_s": utility_s,
                  "p_next_within": fit.within(hold_s)}
        return hold_s, Choice(f"{hold_s:.3f}", "hold-for-next-call" if hold_s > 0 else "not-worth-holding",
                              params=params)
