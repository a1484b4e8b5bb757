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
    """The default, chosen from the capacity-at-SLO sweeps of issue 12 (docs/results.md): Chimera's
    slack rule with no slack (the router chooses among equally loaded models); the engine by the
    working-set gate (a new program starts only where the active programs' contexts leave it room in
    the KV) and llm-d's scorers (prefix x3, queue x2, KV utilization x2); Chimera's STJF priority on
    the predicted remaining tokens, with the engine queue's aging. The design card's composition
    (slack 0.5, memory packer with eq. 4, urgency) is the preset ``hetflow-card``."""

    model: StageConfig = StageConfig("chimera-slack", {"latency_slack": 0.0})
    engine: StageConfig = StageConfig("scored", {"filters": ["working-set"], "scorers": {
        "queue": 2.0, "kv-utilization": 2.0, "prefix-affinity": 3.0}})
    priority: StageConfig = StageConfig("predicted-total-tokens")
    retention: StageConfig = StageConfig("free-at-finish")
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
