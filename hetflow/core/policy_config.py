"""The balancer's five decision stages as configuration: each a plugin type name with its parameters.

A stage is a whole: naming a plugin without parameters runs it with its own defaults (written once, in
its constructor), and a stage left out is the default's, type and parameters together, so no stage's
parameters ever leak into another plugin. In YAML (the stack's ``balancer.policy``, a preset):

    model: chimera-slack
    model_params: {latency_slack: 0.5}
    engine: memory-packer
    engine_params: {then: workload-balanced}
    priority: urgency
    priority_params: {default_slo_scale: 5.0}

(the design card's composition, preset ``hetflow-card``; the default is ``PolicyConfig``'s).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

STAGES = ("model", "engine", "priority", "retention", "reserve")


@dataclass(frozen=True)
class StageConfig:
    type: str
    """The plugin's type name (``hetflow.core.plugins``)."""
    params: Mapping[str, Any] = field(default_factory=dict)
    """Parameters set in configuration; every other is the plugin's default."""


@dataclass(frozen=True)
class PolicyConfig:
    """The default, chosen from issue 35's capacity sweeps (docs/history/results-log.md, "Issue 35"), against vLLM's
    router with Program scheduling, llm-d and the others:

    - model: Chimera's slack rule with no slack (the router chooses among equally loaded models), run
      among the models with a free batch slot when some have none (``open_slots_first``); on code, slack 1
      and a margin of 0.4 per 1,000 tokens the predictor expects the program to bring the more confident
      model (``margin_per_ktoken``), with the router read through one difficulty (the preset's and the
      router's default reading): confirmed on held-out seeds (docs/results.md, "The margin in tokens at
      tau 1, confirmed on seeds 5-7");
    - engine: the working-set gate (a new program starts only where the active programs' contexts,
      each with a quarter of what it will still grow by over its stages to come, leave it KV room; a
      resumed one stays or moves only where its context fits) and the scorers
      queue x2, KV utilization x2, ``program-affinity`` x3 (llm-d's prefix scorer for the calls
      that continue a program) and ``spread-prefix-affinity`` x3 (llm-d's prefix scorer less the
      prompt's head that more of the recent first calls carry than one engine's share: a program's
      first call goes where its database's schema is cached, not where the system prompt every
      program shares is);
    - priority: the program's remaining work on its critical path (Chimera's STJF for chains, scaled
      by Autellix's ATLAS/PLAS for DAGs), with the engine queue's aging;
    - retention: the program's KV kept across its tool gaps for a time chosen by its utility
      (Continuum's; freed at once after the last stage);
    - reserve: none (``no-reserve``): calls are admitted as vLLM admits them, and a batch that outgrows
      the KV preempts. The ``predicted-quantile`` reserve (room for every running call's output at the
      predictor's 0.9 quantile) removes those preemptions but keeps KV empty that a batch could use: on
      ShareGPT chains it cost 2-9% of capacity at SLO (queueing 11-31% with no preemption at the rates
      it failed), where on the agent family it added at most one step of the capacity search
      (docs/history/results-log.md, "The reserve out of the default").

    The first sweeps' default is the preset ``hetflow-no-retention``; the design card's composition (slack 0.5,
    memory packer with eq. 4, urgency) is ``hetflow-card``."""

    model: StageConfig = StageConfig("chimera-slack", {"latency_slack": 0.0, "open_slots_first": True,
                                                       "per_workflow": {"code": {"latency_slack": 1.0,
                                                                                 "margin_per_ktoken": 0.4}}})
    engine: StageConfig = StageConfig("scored", {"filters": [{"working-set": {"resume_where_fits": True,
                                                                             "growth_share": 0.25}}],
                                                 "scorers": {"queue": 2.0, "kv-utilization": 2.0,
                                                             "program-affinity": 3.0,
                                                             "spread-prefix-affinity": 3.0}})
    priority: StageConfig = StageConfig("program-remaining-work")
    retention: StageConfig = StageConfig("workflow-ttl")
    reserve: StageConfig = StageConfig("no-reserve")

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> PolicyConfig:
        unknown = sorted(set(raw) - {*STAGES, *(f"{s}_params" for s in STAGES)})
        if unknown:
            raise ValueError(f"balancer.policy: unknown setting(s) {unknown}; stages are {list(STAGES)}, each "
                             "with <stage>_params")
        default, stages = cls(), {}
        for stage in STAGES:
            params = dict(raw.get(f"{stage}_params") or {})
            if stage in raw:
                stages[stage] = StageConfig(str(raw[stage]), params)
            elif params:
                stages[stage] = StageConfig(getattr(default, stage).type, params)
        return replace(default, **stages)

    def to_mapping(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for stage in STAGES:
            config: StageConfig = getattr(self, stage)
            out[stage], out[f"{stage}_params"] = config.type, dict(config.params)
        return out

    def with_params(self, stage: str, **params: Any) -> PolicyConfig:
        """This policy with ``params`` set on ``stage``, its other parameters kept."""
        config: StageConfig = getattr(self, stage)
        return replace(self, **{stage: StageConfig(config.type, {**config.params, **params})})
