"""A plan as a stack: the stack config (and through ``hetflow compose``, its compose file) that serves
the planned cascade (Cascadia 3.2-3.3: each model type's replicas with their parallelism, the balancer's
cascade with the planned thresholds).

Model types the plan gives no GPUs (no request reaches them) are left out of the cascade, and each kept
one keeps its threshold; with one model type left there is no cascade. A replica is one engine on
tensor x pipeline GPUs; its timing profile is the planner's (``virtual_engine_profile``), written
inline, with a pipelined replica's ``pp`` micro-batches as one engine of ``pp`` times the KV and the
batch. Ports and container names follow examples/compose-gpu.yaml.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from hetflow.core.engine.profile import ROOFLINE_SUFFIX, EngineProfile, catalog_architecture, catalog_gpu
from hetflow.planner.bilevel import Plan
from hetflow.planner.parallelism import virtual_engine_profile

BACKENDS = ("vllm", "sim")
FIRST_ENGINE_PORT, FIRST_ENGINE_METRICS_PORT = 50120, 9120


@dataclass(frozen=True)
class StackSettings:
    """PLAN.yaml's ``stack`` section."""

    name: str = "cascade"
    backend: str = "vllm"
    """``vllm`` (GPU engines; ``model_dirs`` names each model's weights) or ``sim`` (the engine model)."""
    model_dirs: Mapping[str, str] = field(default_factory=dict)
    """Model type -> Hugging Face repository or local directory (``backend: vllm``)."""
    max_model_len: int = 8192

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"stack.backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")


def replica_profile(model: str, gpu: str, tp: int, pp: int) -> EngineProfile:
    """The timing of one (tp, pp) replica as one engine."""
    one = virtual_engine_profile(model, gpu, catalog_architecture(model), catalog_gpu(gpu), tp, pp)
    return replace(one, kv_capacity_tokens=one.kv_capacity_tokens * pp, max_num_seqs=one.max_num_seqs * pp)


def stack_config(result: Plan, settings: StackSettings, priors: Mapping[str, float],
                 judge: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The stack config serving ``result``; ``priors``: each model type's mean quality (0-1), the router's
    fixed priors for calls pinned outside the cascade; ``judge``: the cascade's (``balancer.cascade.judge``),
    by default an LLM judge on the largest model type with GPUs."""
    served = [(a.model, a.gpu, a.parallelism, h) for a, h in zip(result.allocations, [*result.thresholds, None])
              if a.gpus and a.parallelism]
    if not served:
        raise ValueError("the plan gives no model type any GPU")
    missing = [m for m, *_ in served if settings.backend == "vllm" and m not in settings.model_dirs]
    if missing:
        raise ValueError(f"stack.model_dirs must name the weights of {missing} (a Hugging Face repository or a "
                         "directory) for backend vllm")
    engines = [_engine(model, gpu, par.tp, par.pp, i, settings) for model, gpu, par, _ in served
               for i in range(par.dp)]
    for n, engine in enumerate(engines):
        engine["port"], engine["metrics_port"] = FIRST_ENGINE_PORT + n, FIRST_ENGINE_METRICS_PORT + n
    models = [model for model, *_ in served]
    thresholds = [round(h, 3) for *_, h in served[:-1] if h is not None]
    balancer: dict[str, Any] = {"host": "balancer", "port": 50110, "metrics_port": 9110}
    if len(models) > 1:
        balancer["cascade"] = {"models": models, "thresholds": thresholds,
                               "judge": dict(judge or {}) or {"kind": "llm", "model": models[-1]}}
    return {
        "stack": {"name": settings.name, "host": "0.0.0.0"},
        "monitor": {"host": "monitor", "port": 50100, "metrics_port": 9100},
        "router": {"host": "router", "port": 50101, "metrics_port": 9101, "kind": "fixed-prior",
                   "models": {m: round(float(priors.get(m, 0.5)), 3) for m in models}},
        "predictor": {"host": "predictor", "port": 50102, "metrics_port": 9102, "kind": "input-length"},
        "balancer": balancer,
        "gateway": {"host": "gateway", "port": 8000},
        "engines": engines,
    }


def _engine(model: str, gpu: str, tp: int, pp: int, index: int, settings: StackSettings) -> dict[str, Any]:
    name = f"{model.replace('.', '')}-{index}"
    engine: dict[str, Any] = {"name": name, "host": f"engine-{name}", "backend": settings.backend, "model": model}
    profile = replica_profile(model, gpu, tp, pp)
    # The roofline the plan was made with, the measured GPUs' included (hetflow.planner.parallelism).
    engine["profile"] = f"{model}@{gpu}{ROOFLINE_SUFFIX}" if tp == pp == 1 else profile.to_dict()
    if settings.backend == "vllm":
        engine["vllm"] = {"model_dir": settings.model_dirs[model], "load_format": "auto",
                          "max_model_len": settings.max_model_len, "max_num_seqs": profile.max_num_seqs,
                          "tensor_parallel_size": tp, "pipeline_parallel_size": pp}
    return engine
