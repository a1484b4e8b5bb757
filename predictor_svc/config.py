"""predictor_svc configuration: the stack YAML's ``predictor`` section."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from hetflow.runtime.config import service_config, stack_defaults
from hetflow.runtime.server import ServeConfig
from hetflow.runtime.workers import worker_count


@dataclass(frozen=True)
class PredictorConfig:
    kind: str = "input-length"
    """Predictor type: ``input-length`` (Chimera table 3 baseline) or ``qrf`` (Chimera 3.4)."""
    artifact: str = ""
    """qrf: directory written by ``hetflow train predictor``; reloaded when its meta.json changes."""
    models: tuple[str, ...] = ()
    """When set, the artifact must have been trained for these models."""
    reload_poll_s: float = 2.0
    """How often the artifact is checked for a new version; 0 disables reloading."""
    max_batch_size: int = 64
    max_wait_ms: float = 0.0
    """Extra wait to fill a batch. 0: calls that arrive while a batch runs form the next one."""
    workers: int | None = None
    """Prediction processes; 0 predicts in the service's own process. None: 0 for ``input-length``,
    whose prediction costs less than handing a batch to a worker and back, and 1 for the QRF."""
    serve: ServeConfig = field(default_factory=ServeConfig)

    def worker_processes(self) -> int:
        return worker_count(self.workers, self.kind == "input-length", "predictor")

    def predictor_spec(self) -> dict[str, Any]:
        if self.kind == "input-length":
            return {"kind": self.kind}
        return {"kind": self.kind, "artifact": self.artifact, "models": list(self.models)}


def from_stack(raw: Mapping[str, Any]) -> PredictorConfig:
    section = dict(raw.get("predictor", {}))
    if "models" in section:
        section["models"] = tuple(section["models"])
    if section.get("artifact"):
        section["artifact"] = str(Path(section["artifact"]).expanduser())
    return service_config(PredictorConfig, section, "predictor",
                          stack_defaults(raw, "predictor"))
