"""predictor_svc configuration: the stack YAML's ``predictor`` section."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from hetflow.config import service_config
from hetflow.runtime.server import ServeConfig


@dataclass(frozen=True)
class PredictorConfig:
    kind: str = "input-length"
    """Predictor type: ``input-length`` (Chimera table 3 baseline)."""
    max_batch_size: int = 64
    max_wait_ms: float = 0.0
    """Extra wait to fill a batch. 0: calls that arrive while a batch runs form the next one."""
    workers: int = 1
    serve: ServeConfig = field(default_factory=ServeConfig)

    def predictor_spec(self) -> dict[str, Any]:
        return {"kind": self.kind}


def from_stack(raw: Mapping[str, Any]) -> PredictorConfig:
    return service_config(PredictorConfig, raw.get("predictor", {}), "predictor",
                          {"host": raw.get("stack", {}).get("host", "127.0.0.1")})
