"""The balancer's three decision stages as configuration: a plugin type name and its parameters each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

DEFAULT_STAGES: Mapping[str, tuple[str, Mapping[str, Any]]] = {
    "model": ("chimera-slack", {"latency_slack": 0.5, "confidence_margin": 0.05}),
    "priority": ("urgency", {"default_slo_scale": 5.0}),
    "engine": ("memory-packer", {"then": "workload-balanced", "alpha": 0.0, "beta": 1.0}),
}
"""The design card's default per stage, with its parameters: Chimera's slack rule (tau, delta_s);
HexGen-Flow's urgency, calls without a deadline getting 5x their remaining cost; Kairos's memory packer
deciding which engines have room and HexGen-Flow's eq. 4 choosing among them (docs/results.md compares
it with each paper's policy on that paper's workload)."""


@dataclass(frozen=True)
class PolicyConfig:
    """The three decision stages, each a plugin type name with its parameters. Parameters left out are
    the default's (``DEFAULT_STAGES``) for the default plugin, and the plugin's own for any other."""

    model: str = DEFAULT_STAGES["model"][0]
    model_params: Mapping[str, Any] = None  # type: ignore[assignment]  # filled in __post_init__
    priority: str = DEFAULT_STAGES["priority"][0]
    priority_params: Mapping[str, Any] = None  # type: ignore[assignment]
    engine: str = DEFAULT_STAGES["engine"][0]
    engine_params: Mapping[str, Any] = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        for stage, (default, params) in DEFAULT_STAGES.items():
            if getattr(self, f"{stage}_params") is None:
                object.__setattr__(self, f"{stage}_params", dict(params) if getattr(self, stage) == default else {})
