"""balancer_svc configuration: the stack YAML's ``balancer`` section."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from hetflow.config import service_config
from hetflow.runtime.server import ServeConfig


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


@dataclass(frozen=True)
class BalancerConfig:
    monitor_address: str = ""
    router_address: str = ""
    predictor_address: str = ""
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    quantiles: tuple[float, ...] = (0.1, 0.9)
    """Quantiles of the remaining-token prediction asked for and written in the receipt."""
    max_tokens_limit: int = 32768
    """Largest max_tokens a call may ask for."""
    past_deadline: str = "reject"
    """A call that arrives after its program's deadline: "reject" (DEADLINE_EXCEEDED) or "best-effort"
    (served without the deadline; the receipt says so)."""
    alpha_tuning: bool = True
    """HexGen-Flow 4.3: re-tune the engine stage's alpha by replay when tail latency regresses; only
    where the engine stage has an alpha (workload-balanced, or memory-packer then workload-balanced)."""
    alpha_window_s: float = 100.0
    """The tuner's sliding window (HexGen-Flow: 100 s)."""
    dependency_timeout_s: float = 2.0
    """Timeout of each router, predictor and monitor call on the request path."""
    serve: ServeConfig = field(default_factory=ServeConfig)

    def __post_init__(self) -> None:
        if self.past_deadline not in ("reject", "best-effort"):
            raise ValueError(f"balancer.past_deadline must be reject or best-effort, got {self.past_deadline!r}")


def from_stack(raw: Mapping[str, Any]) -> BalancerConfig:
    host = raw.get("stack", {}).get("host", "127.0.0.1")
    defaults: dict[str, Any] = {"host": host}
    for name in ("monitor", "router", "predictor"):
        section = raw.get(name, {})
        if "port" in section:
            defaults[f"{name}_address"] = f"{section.get('host', host)}:{section['port']}"
    section = dict(raw.get("balancer", {}))
    if "quantiles" in section:
        section["quantiles"] = tuple(section["quantiles"])
    return service_config(BalancerConfig, section, "balancer", defaults)
