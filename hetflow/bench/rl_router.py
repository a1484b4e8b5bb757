"""Issue 16's benchmark: the load-balancer paper's RL router (4.3) against round robin, the paper's
heuristics (C.2-C.3), vLLM's balancer and hetflow's default engine choice, in the simulator's harness
(``simulator.run.Simulation``: the same pipeline, monitor snapshot and engine model the services run).

Workload: independent requests drawn from ShareGPT conversations and the task families
(``hetflow.workloads.requests``), Poisson arrivals. Every policy gets the true decode lengths (the oracle
the paper's decode balancer and dedicated small-large assume), FCFS engines (vLLM's default, the paper's
setup) and the same model stage (one model). Two loads, both fixed before any policy runs:

- the paper's arrival rate per instance: 5 requests/s (20/s on 4 instances, section 5; 40/s on 8, C.11);
  E2E latency, TTFT, TBT, queueing share and stability per seed;
- capacity at SLO (``hetflow.bench.capacity``): the highest rate at which 95% of requests finish within
  5x their latency alone, stable and sustained.

    python -m hetflow.bench.rl_router -c bench/clusters/homo-l4.yaml --policy-file rl-l4x4.pt --seeds 0,1,2
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Sequence

from hetflow.bench.capacity import Probe, SloRule, find_capacity
from hetflow.bench.cluster import cluster_from_stack
from hetflow.bench.sweep import at_rate, servable
from hetflow.core.engine.profile import EngineSpec
from hetflow.core.engine.queues import QueueConfig
from hetflow.core.policy_config import PolicyConfig, StageConfig
from hetflow.core.presets import PRESETS
from hetflow.core.stats import percentile
from hetflow.core.trace import StageRecord
from hetflow.runtime.config import load_stack
from hetflow.workloads.requests import MIXED_FAMILIES, independent_requests
from simulator.metrics import summarize
from simulator.run import ProgramResult, Simulation
from simulator.signals import Signals

RATE_PER_INSTANCE_PER_S = 5.0
"""Section 5: 20 requests/s on 4 instances; C.11: 40/s on 8."""
BASELINES = ("round-robin", "jsq", "max-capacity", "max-capacity-reserved", "min-min", "least-work-left",
             "decode-balancer", "dedicated-small-large", "least-load", "hetflow")
"""The engine choices compared with the RL router, by their preset names (``hetflow.core.presets``, the
names ``hetflow bench`` and ``hetflow simulate`` take): round robin and the paper's heuristics (C.2.4,
C.2.6, C.3.1-C.3.3, JSQ in 5.1), maximum capacity usage with the RL router's room rule and step (the
heuristic it learns from), vLLM 0.32's data-parallel balancer and hetflow's default. Each runs as its
preset's engine stage; the model choice and FCFS are the paper's for every one (``policy_for``)."""


def engine_choices(names: Sequence[str], policy_file: str | None) -> dict[str, StageConfig]:
    """Each named policy's engine stage; ``rl-router`` is the trained router of ``policy_file``. An unknown
    name is a ValueError that lists the known ones."""
    known = [*BASELINES, "rl-router"]
    unknown = [n for n in names if n not in known and n not in PRESETS]
    if unknown:
        raise ValueError(f"unknown policy {', '.join(map(repr, unknown))}; known: {', '.join(known)} "
                         f"(or any of hetflow's presets: {', '.join(p for p in PRESETS if p not in known)})")
    if "rl-router" in names and not policy_file:
        raise ValueError("rl-router needs --policy-file")
    return {n: StageConfig("rl-router", {"policy": policy_file}) if n == "rl-router" else PRESETS[n].policy.engine
            for n in names}


@dataclass(frozen=True)
class Task:
    policy: str
    engine: StageConfig
    seed: int
    cluster: str
    requests: int
    families: tuple[str, ...]
    rate_per_s: float
    capacity: bool


def policy_for(engine: StageConfig) -> PolicyConfig:
    return PolicyConfig(model=StageConfig("least-load"), engine=engine, priority=StageConfig("fcfs"))


@functools.lru_cache(maxsize=4)
def cluster_and_trace(cluster: str, requests: int, seed: int, families: tuple[str, ...]
                      ) -> tuple[list[EngineSpec], list[StageRecord]]:
    """The cluster, and the seed's requests at unit rate without those no engine could hold (as every
    sweep drops them); made once per worker process."""
    engines = cluster_from_stack(load_stack(Path(cluster)))
    return engines, servable(independent_requests(requests, seed, 1.0, families, [engines[0].model]), engines)[0]


def token_times(results: Sequence[ProgramResult]) -> dict[str, float]:
    """Mean and p95 TTFT (arrival to first token) and mean TBT (first to last token per further token)."""
    calls = [(r, c) for r in results for c in r.calls.values()]
    ttft = sorted(c.first_token_s - r.arrival_s for r, c in calls)
    tbt = [(c.finished_s - c.first_token_s) / (c.output_tokens - 1) for _, c in calls if c.output_tokens > 1]
    return {"ttft_mean_s": statistics.mean(ttft), "ttft_p95_s": percentile(ttft, 0.95),
            "tbt_mean_ms": 1e3 * statistics.mean(tbt)}


def run_once(engines: Sequence[EngineSpec], engine_choice: StageConfig, records: Sequence[StageRecord],
             rate_per_s: float) -> dict[str, Any]:
    sim = Simulation(engines, policy_for(engine_choice), Signals(prediction="oracle"), QueueConfig())
    results = sim.run(at_rate(records, rate_per_s))
    summary = summarize(results, sim.decision_ms, SloRule().slo_scale)
    return {"rate_per_s": rate_per_s, "requests": summary["programs"], "rejected": len(sim.rejected),
            "e2e_mean_s": summary["latency_s"]["mean"], "e2e_p95_s": summary["latency_s"]["p95"],
            **token_times(results), "queueing_share": summary["queueing_share"],
            "preemptions": summary["preemptions"], "held_in_balancer": sim.held,
            "stable": summary["steady_stability"]["stable"], "within_slo_share": summary["within_slo_share"],
            "decision_ms_p50": summary["scheduler_overhead_ms"]["p50"], "_summary": summary}


def run_task(task: Task) -> dict[str, Any]:
    import torch

    torch.set_num_threads(1)
    engines, records = cluster_and_trace(task.cluster, task.requests, task.seed, task.families)
    out = {"policy": task.policy, "seed": task.seed}
    fixed = run_once(engines, task.engine, records, task.rate_per_s)
    out["fixed_rate"] = {k: v for k, v in fixed.items() if k != "_summary"}
    if task.capacity:
        rule = SloRule()

        def probe(rate: float) -> Probe:
            summary = run_once(engines, task.engine, records, rate)["_summary"]
            summary["rejected_calls"] = 0
            failures = rule.failures(summary)
            return Probe(rate, not failures, {"queueing_share": summary["queueing_share"]}, failures)

        found = find_capacity(probe, task.rate_per_s)
        at = next(p for p in reversed(found.probes) if p.rate_per_s == found.rate_per_s) if found.rate_per_s else None
        out["capacity"] = {"rate_per_s": found.rate_per_s, "failed_above_per_s": found.failed_above_per_s,
                           "queueing_share_at_capacity": at.summary["queueing_share"] if at else None,
                           "probes": len(found.probes)}
    return out


def report(rows: Sequence[dict[str, Any]]) -> str:
    """Per policy: the median and range over seeds of each figure, and E2E against round robin per seed."""
    by_policy: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_policy.setdefault(row["policy"], []).append(row)
    rr = {r["seed"]: r["fixed_rate"]["e2e_mean_s"] for r in by_policy.get("round-robin", [])}
    lines = [f"{'policy':<22} {'E2E mean s':>18} {'E2E cut vs RR':>16} {'TTFT s':>8} {'TBT ms':>7} {'queue':>6} "
             f"{'preempt':>7} {'stable':>6} {'capacity/s':>20}"]

    def spread(values: list[float], fmt: str) -> str:
        return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"

    for policy, runs in by_policy.items():
        fixed = [r["fixed_rate"] for r in runs]
        gain = [100 * (1 - r["fixed_rate"]["e2e_mean_s"] / rr[r["seed"]]) for r in runs if r["seed"] in rr]
        caps = [r["capacity"]["rate_per_s"] for r in runs if "capacity" in r]
        lines.append(f"{policy:<22} {spread([f['e2e_mean_s'] for f in fixed], '.2f'):>18} "
                     f"{spread(gain, '+.1f') + '%' if gain else '':>16} "
                     f"{statistics.median(f['ttft_mean_s'] for f in fixed):>8.2f} "
                     f"{statistics.median(f['tbt_mean_ms'] for f in fixed):>7.1f} "
                     f"{statistics.median(f['queueing_share'] for f in fixed):>6.3f} "
                     f"{statistics.median(f['preemptions'] for f in fixed):>7.0f} "
                     f"{sum(f['stable'] for f in fixed)}/{len(fixed):<4} "
                     f"{spread(caps, '.1f') if caps else '':>20}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m hetflow.bench.rl_router", description=__doc__.split("\n\n")[0])
    p.add_argument("--report", nargs="+", help="print the table of runs saved by --out, and run nothing")
    p.add_argument("-c", "--cluster", help="stack config of one model's engines")
    p.add_argument("--policy-file", help="hetflow train rl's policy for these engines (for rl-router)")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--families", default=",".join(MIXED_FAMILIES))
    p.add_argument("--policies", default="",
                   help="comma-separated policy names, as hetflow bench takes them (default: baselines, rl-router)")
    p.add_argument("--no-capacity", action="store_true", help="only the paper's fixed rate")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", help="write every run as JSON here")
    args = p.parse_args(argv)
    if args.report:
        print(report([row for path in args.report for row in json.loads(Path(path).read_text())]))
        return
    if not args.cluster:
        p.error("--cluster is required to run")
    names = args.policies.split(",") if args.policies else [*BASELINES, "rl-router"]
    try:
        choices = engine_choices(names, args.policy_file)
    except ValueError as exc:
        raise SystemExit(f"{p.prog}: {exc}") from None
    engines = cluster_from_stack(load_stack(Path(args.cluster)))
    rate = RATE_PER_INSTANCE_PER_S * len(engines)
    tasks = [Task(n, choices[n], int(s), args.cluster, args.requests, tuple(args.families.split(",")), rate,
                  not args.no_capacity) for n in names for s in args.seeds.split(",")]
    print(f"{len(engines)} engines of {engines[0].model} ({engines[0].profile.name}); {args.requests} requests per "
          f"seed, {rate:g}/s fixed rate; seeds {args.seeds}", flush=True)
    rows = []
    with ProcessPoolExecutor(args.workers, mp_context=get_context("spawn")) as pool:
        for row in pool.map(run_task, tasks):  # in the tasks' order, each shown and saved once done
            rows.append(row)
            fixed = row["fixed_rate"]
            print(f"{row['policy']} seed {row['seed']}: E2E {fixed['e2e_mean_s']:.2f} s, queueing share "
                  f"{fixed['queueing_share']:.3f}, stable {fixed['stable']}", flush=True)
            if args.out:
                Path(args.out).write_text(json.dumps(rows, indent=1))
    print(report(rows))


if __name__ == "__main__":
    main()
