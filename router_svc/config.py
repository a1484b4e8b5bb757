"""router_svc configuration: the stack YAML's ``router`` section."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

from hetflow.runtime.config import SERVE_KEYS, service_config, stack_defaults
from hetflow.runtime.server import ServeConfig
from hetflow.runtime.workers import worker_count


@dataclass(frozen=True)
class RouterConfig:
    kind: str = "fixed-prior"
    """Scorer type: ``fixed-prior`` (Chimera's without-router ablation) or ``minilm-onnx`` (Chimera 3.3)."""
    models: Mapping[str, float] = field(default_factory=dict)
    """Models scored, with the prior confidence the fixed-prior scorer returns (minilm-onnx: the artifact
    must score exactly these models; the priors are not used)."""
    artifact: str = ""
    """minilm-onnx: directory written by ``hetflow train router``; reloaded when its meta.json changes."""
    scorer_params: Mapping[str, Any] = field(default_factory=dict)
    """The scorer's own parameters (minilm-onnx: precision, threads, micro_batch), given beside ``kind``
    in YAML; those left out are the scorer's defaults."""
    reload_poll_s: float = 2.0
    max_batch_size: int = 32
    max_wait_ms: float = 0.0
    """Extra wait to fill a batch. 0: calls that arrive while a batch runs form the next one."""
    workers: int | None = None
    """Inference processes; 0 scores in the service's own process. None: 0 for ``fixed-prior``, whose
    scoring costs less than handing a batch to a worker and back, and 1 for the encoder, whose forward
    passes must not hold up the event loop."""
    serve: ServeConfig = field(default_factory=ServeConfig)

    def worker_processes(self) -> int:
        return worker_count(self.workers, self.kind == "fixed-prior", "router")

    def scorer_spec(self) -> dict[str, Any]:
        artifact = {"artifact": self.artifact} if self.kind != "fixed-prior" else {}
        return {"kind": self.kind, "models": dict(self.models), **artifact, **self.scorer_params}


def from_stack(raw: Mapping[str, Any]) -> RouterConfig:
    section = dict(raw.get("router", {}))
    if isinstance(section.get("models"), list):      # a plain list names the models (no priors)
        section["models"] = {m: 0.5 for m in section["models"]}
    if section.get("artifact"):
        section["artifact"] = str(Path(section["artifact"]).expanduser())
    own = {f.name for f in fields(RouterConfig)} | set(SERVE_KEYS)
    section["scorer_params"] = {**section.get("scorer_params", {}),
                                **{k: section.pop(k) for k in list(section) if k not in own}}
    return service_config(RouterConfig, section, "router", stack_defaults(raw, "router"))
