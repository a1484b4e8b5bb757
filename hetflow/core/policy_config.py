"""The balancer's three decision stages as configuration: each a plugin type name with its parameters.

A stage is a whole: naming a plugin without parameters runs it with its own defaults (written once, in
its constructor), and a stage left out is the default's, type and parameters together, so no stage's
parameters ever leak into another plugin. In YAML (the stack's ``balancer.policy``, a preset):

    model: chimera-slack
    model_params: {latency_slack: 0.5}
    engine: memory-packer
    engine_params: {then: workload-balanced}
    priority: urgency
    priority_params: {default_slo_scale: 5.0}
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

STAGES = ("model", "engine", "priority")


@dataclass(frozen=True)
class StageConfig:
    type: str
    """The plugin's type name (``hetflow.core.plugins``)."""
    params: Mapping[str, Any] = field(default_factory=dict)
    """Parameters set in configuration; every other is the plugin's default."""


@dataclass(frozen=True)
class PolicyConfig:
    """The design card's default: Chimera's slack rule choosing the model; Kairos's memory packer
    deciding which engines have room and HexGen-Flow's eq. 4 choosing among them; HexGen-Flow's
    urgency, calls without a deadline getting one at 5x their remaining cost (docs/results.md compares
    it with each paper's policy on that paper's workload)."""

    model: StageConfig = StageConfig("chimera-slack")
    engine: StageConfig = StageConfig("memory-packer", {"then": "workload-balanced"})
    priority: StageConfig = StageConfig("urgency", {"default_slo_scale": 5.0})

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
