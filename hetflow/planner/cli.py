"""``hetflow plan -c PLAN.yaml``: Cascadia's bi-level plan for a cascade, a GPU budget, a workload and
a quality requirement (issue 15; examples/plan-cascade.yaml shows every setting).

    cascade: [qwen2.5-1.5b-instruct, qwen2.5-7b-instruct, qwen2.5-14b-instruct]   # smallest first
    gpus: {h100-80g: 8}                     # the budget per GPU type (the profile catalog's names)
    workload: {family: code, programs: 400, seed: 0, sample: 200, rate_per_s: 8}   # or trace: PATH.jsonl
    requirement: {q_min: 70, mu: 100, stable_iterations: 3}
    simulation: {requests: 200, seed: 0}    # Sim(w_i, f_i): requests per simulated replica
    judge: {kind: llm, model: qwen2.5-14b-instruct}   # the cascade's judge; an LLM judge's calls load its model
    stack: {name: cascade, backend: vllm, model_dirs: {MODEL: HF repo or directory}}   # --stack-dir's output

With ``--stack-dir DIR`` it writes DIR/stack.yaml, the stack that serves the plan
(``hetflow.planner.stack``), and DIR/compose.yaml, its compose file (``hetflow compose``).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from hetflow.core.cascade.config import JudgeSpec
from hetflow.core.cascade.modelled_judge import JUDGE_AGREEMENT
from hetflow.core.engine.profile import catalog_architecture, catalog_gpu
from hetflow.core.trace import read_jsonl
from hetflow.planner.bilevel import JudgeLoad, Plan, PlanError, Requirement, plan
from hetflow.planner.deployment import LatencyTable, ModelType
from hetflow.planner.parallelism import Parallelism
from hetflow.planner.routing import SampledRequest
from hetflow.planner.sample import sample_from_trace
from hetflow.planner.stack import StackSettings, stack_config
from hetflow.runtime.typed_config import build


@dataclass(frozen=True)
class WorkloadConfig:
    family: str = "code"
    programs: int = 400
    seed: int = 0
    trace: str = ""
    """A trace JSONL to sample from instead of generating ``family``."""
    sample: int = 200
    """Calls profiled on every model (Cascadia 4.4 samples 50 every 5 minutes)."""
    rate_per_s: float = 0.0
    """Calls per second the plan must serve."""
    judge_agreement: float = JUDGE_AGREEMENT


@dataclass(frozen=True)
class SimulationConfig:
    requests: int = 200
    seed: int = 0


@dataclass(frozen=True)
class PlanConfig:
    cascade: list[str] = field(default_factory=list)
    gpus: Mapping[str, int] = field(default_factory=dict)
    workload: WorkloadConfig = WorkloadConfig()
    requirement: Mapping[str, Any] = field(default_factory=dict)
    simulation: SimulationConfig = SimulationConfig()
    judge: Mapping[str, Any] = field(default_factory=dict)
    """``balancer.cascade.judge`` of the stack; default an LLM judge on the last model type. An LLM judge's
    calls are planned as load on its model type (``JudgeLoad``)."""
    stack: StackSettings = StackSettings()

    @property
    def judge_spec(self) -> JudgeSpec:
        return JudgeSpec(**{"kind": "llm", "model": self.cascade[-1] if self.cascade else "", **self.judge})


def load(path: Path) -> PlanConfig:
    raw = yaml.safe_load(path.read_text()) or {}
    cfg = build(PlanConfig, raw, path.name)
    if not cfg.gpus or any(int(n) < 1 for n in cfg.gpus.values()):
        raise PlanError("gpus: give the budget as {gpu type: count >= 1}")
    return cfg


def profiled_sample(cfg: PlanConfig) -> list[SampledRequest]:
    """The workload's calls as every model type answers them, graded (``hetflow.planner.sample``)."""
    return sample_from_trace(_records(cfg.workload, cfg.cascade), cfg.cascade, cfg.workload.sample,
                             cfg.workload.seed, cfg.workload.judge_agreement)


def run(cfg: PlanConfig, sample: list[SampledRequest] | None = None) -> tuple[Plan, list[SampledRequest]]:
    """The plan and the profiled sample it was made for (``sample``, or the workload's)."""
    models = [ModelType(name, catalog_architecture(name)) for name in cfg.cascade]
    table = LatencyTable({g: catalog_gpu(g) for g in cfg.gpus}, {g: int(n) for g, n in cfg.gpus.items()},
                         sim_requests=cfg.simulation.requests, seed=cfg.simulation.seed)
    sample = sample if sample is not None else profiled_sample(cfg)
    requirement = build(Requirement, cfg.requirement, "requirement")
    judge = cfg.judge_spec
    load = JudgeLoad(judge.model, output_tokens=judge.max_tokens) if judge.kind == "llm" else None
    return plan(models, sample, cfg.workload.rate_per_s, table, requirement, load), sample


def _records(w: WorkloadConfig, models: list[str]) -> list[Any]:
    if w.trace:
        return list(read_jsonl(Path(w.trace)))
    from hetflow.workloads.generate import generate

    try:
        return generate(w.family, w.programs, w.seed, models=models)
    except ModuleNotFoundError as exc:  # the data sets come with the lab
        raise ValueError(f"workload.family {w.family!r} reads the data set {exc.name!r}, which the bench extra "
                         "installs (pip install 'hetflow[bench]'); or plan from a recorded workload.trace") from exc


def to_dict(result: Plan) -> dict[str, Any]:
    out = dataclasses.asdict(result)
    for a in out["allocations"]:
        a["parallelism"] = str(Parallelism(**a["parallelism"])) if a["parallelism"] else None
    return out


def main(config: Path, out: Path | None, stack_dir: Path | None = None) -> int:
    cfg = load(config)
    result, sample = run(cfg)
    if stack_dir is not None:  # checked before anything is written
        stack = stack_config(result, cfg.stack, mean_quality(sample), dataclasses.asdict(cfg.judge_spec))
    text = json.dumps(to_dict(result), indent=2)
    if out:
        out.write_text(text + "\n")
    print(summary(result))
    if stack_dir is not None:
        write_stack(stack, stack_dir)
    return 0


def mean_quality(sample: list[SampledRequest]) -> dict[str, float]:
    """Each model type's mean grade over the sample, 0-1."""
    return {m: sum(r.score[m] for r in sample) / len(sample) / 100.0 for m in sample[0].score}


def write_stack(stack: dict[str, Any], stack_dir: Path) -> None:
    from hetflow.deploy.compose import render

    stack_dir.mkdir(parents=True, exist_ok=True)
    header = "# Written by `hetflow plan --stack-dir`: the stack serving the plan (Cascadia 3.2-3.3).\n"
    (stack_dir / "stack.yaml").write_text(header + yaml.safe_dump(stack, sort_keys=False, width=110))
    (stack_dir / "compose.yaml").write_text(render(stack, "./stack.yaml"))
    print(f"wrote {stack_dir / 'stack.yaml'} and {stack_dir / 'compose.yaml'}")


def summary(result: Plan) -> str:
    lines = [f"quality {result.quality:.2f} (utopia {result.utopia:.2f}, nadir {result.nadir:.2f}); "
             f"p95 {result.p95_s:.2f} s; {result.iterations} iterations, {result.evaluated} routings, "
             f"{result.runtime_s:.1f} s"]
    if not result.meets_q_min:
        lines.append(f"  WARNING: quality {result.quality:.2f} falls short of q_min {result.q_min:g}: no routing the "
                     "budget serves reaches it (more GPUs, a lower rate or an outside judge would)")
    thresholds = [*result.thresholds, None]
    for a, share, h in zip(result.allocations, result.processed_share, thresholds):
        where = f"{a.gpus} x {a.gpu} ({a.parallelism})" if a.gpus else "no GPUs"
        accept = f", accepts at score >= {h:.1f}" if h is not None else ""
        lines.append(f"  {a.model}: {share:.0%} of requests{accept}; {where}; p95 {a.p95_s:.2f} s")
    return "\n".join(lines)
