"""router_svc configuration: the stack YAML's ``router`` section."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from hetflow.config import service_config
from hetflow.runtime.server import ServeConfig


@dataclass(frozen=True)
class RouterConfig:
    kind: str = "fixed-prior"
    """Scorer type: ``fixed-prior`` (Chimera's without-router ablation)."""
    models: Mapping[str, float] = field(default_factory=dict)
    """Models scored, with the prior confidence the fixed-prior scorer returns."""
    max_batch_size: int = 32
    max_wait_ms: float = 0.0
    """Extra wait to fill a batch. 0: calls that arrive while a batch runs form the next one."""
    workers: int = 1
    """Inference processes."""
    serve: ServeConfig = field(default_factory=ServeConfig)

    def scorer_spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "models": dict(self.models)}


def from_stack(raw: Mapping[str, Any]) -> RouterConfig:
    return service_config(RouterConfig, raw.get("router", {}), "router",
                          {"host": raw.get("stack", {}).get("host", "127.0.0.1")})
