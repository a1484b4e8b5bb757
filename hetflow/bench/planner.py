"""The deployment planner's runtime and optimality gap (issue 15; Cascadia 4.4 and appendix J).

    python -m hetflow.bench.planner --runtime 16,32,48,64,80 --gap 8 --seeds 0,1,2

- runtime: Algorithm 1 for the three-model Qwen2.5 cascade (1.5B -> 7B -> 14B) on N H100s serving
  HumanEval-based coding calls at 4 calls/s per GPU (the load grows with the budget by this rule,
  fixed before any run), q_min 60 on the judge's scale; wall time per N, each seed's sample its own.
- gap: on a small case (1.5B -> 7B, 8 H100s, 32 calls/s), J of the bi-level plan against the
  exhaustive search over every threshold level with its optimal deployment (appendix J: 2-6%).
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

from hetflow.bench.common import write
from hetflow.core.engine.profile import catalog_architecture, catalog_gpu
from hetflow.planner.bilevel import Requirement, exhaustive, plan
from hetflow.planner.deployment import LatencyTable, ModelType
from hetflow.planner.routing import SampledRequest
from hetflow.planner.sample import sample_from_trace
from hetflow.workloads.generate import generate

CASCADE = ("qwen2.5-1.5b-instruct", "qwen2.5-7b-instruct", "qwen2.5-14b-instruct")
GPU = "h100-80g"
CALLS_PER_S_PER_GPU = 4.0
Q_MIN = 60.0
SAMPLE = 150
SIM_REQUESTS = 150


def _sample(models: tuple[str, ...], seed: int) -> list[SampledRequest]:
    return sample_from_trace(generate("code", 2 * SAMPLE, seed, models=list(models)), models, SAMPLE, seed)


def _table(gpus: int, seed: int) -> LatencyTable:
    return LatencyTable({GPU: catalog_gpu(GPU)}, {GPU: gpus}, sim_requests=SIM_REQUESTS, seed=seed)


def _models(names: tuple[str, ...]) -> list[ModelType]:
    return [ModelType(n, catalog_architecture(n)) for n in names]


def runtime(gpus: int, seed: int) -> dict[str, Any]:
    result = plan(_models(CASCADE), _sample(CASCADE, seed), CALLS_PER_S_PER_GPU * gpus, _table(gpus, seed),
                  Requirement(q_min=Q_MIN))
    return {"gpus": gpus, "seed": seed, "runtime_s": round(result.runtime_s, 2), "iterations": result.iterations,
            "routings": result.evaluated, "p95_s": round(result.p95_s, 3), "quality": round(result.quality, 2),
            "allocation": [f"{a.model}: {a.gpus} ({a.parallelism})" for a in result.allocations]}


def gap(gpus: int, seed: int) -> dict[str, Any]:
    names = CASCADE[:2]
    sample, rate = _sample(names, seed), CALLS_PER_S_PER_GPU * gpus
    table = _table(gpus, seed)  # shared: both searches read the same simulated latencies
    found = plan(_models(names), sample, rate, table, Requirement(q_min=Q_MIN))
    best = exhaustive(_models(names), sample, rate, table, Requirement(q_min=Q_MIN))
    return {"gpus": gpus, "seed": seed, "bi_level_objective": round(found.objective, 4),
            "exhaustive_objective": round(best.objective, 4), "gap": round(found.objective / best.objective - 1, 4),
            "bi_level_routings": found.evaluated, "exhaustive_routings": best.evaluated}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runtime", default="16,32,48,64,80", help="GPU budgets to time (empty: none)")
    parser.add_argument("--gap", type=int, default=8, help="GPUs of the optimality-gap case (0: none)")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--out", default="planner", help="report name: bench_out/<name>.json")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    result: dict[str, Any] = {"command": f"python -m hetflow.bench.planner --runtime {args.runtime} --gap {args.gap} "
                                         f"--seeds {args.seeds}"}
    if args.runtime:
        runs = [runtime(int(n), seed) for n in args.runtime.split(",") for seed in seeds]
        result["runtime"] = runs
        for n in args.runtime.split(","):
            times = [r["runtime_s"] for r in runs if r["gpus"] == int(n)]
            print(f"{n} GPUs: median {statistics.median(times):.1f} s (range {min(times):.1f}-{max(times):.1f})")
    if args.gap:
        gaps = [gap(args.gap, seed) for seed in seeds]
        result["gap"] = gaps
        print("gap: " + ", ".join(f"seed {g['seed']}: {g['gap']:.1%}" for g in gaps))
    print(f"-> {write(args.out, result)}")


if __name__ == "__main__":
    main()
