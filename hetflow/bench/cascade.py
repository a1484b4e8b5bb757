"""Cascades against the stand-alone model and against Chimera's routing at equal quality (issue 15;
Cascadia 4.2), in hetflow's simulator.

    python -m hetflow.bench.cascade --seeds 0,1,2          # writes bench_out/cascade.json

The rule, fixed before any system runs:

- Cascade 1.5B -> 7B -> 14B (Qwen2.5) on ``--gpus`` H100s; workload: generated programs of
  ``--families`` (math and code by default; each seed its own trace); the planner's sample comes from
  another trace (seed + 1000), never the evaluated one. Quality is the modelled LLM judge's mean grade
  of the answers (Cascadia's Q), with the ground-truth accuracy of the programs' final answers beside it.
- q_min = nadir + ``--q-share`` x (utopia - nadir) on the planning sample; the planning rate is 70% of
  what the stand-alone model's GPUs serve by the fluid bound (``capacity_per_s``).
- Stand-alone: the smallest model whose sample quality reaches q_min, on every GPU, its replicas and
  parallelism from the deployment solver (Cascadia's "stand-alone serving").
- Cascade (Cascadia): ``hetflow plan``'s thresholds and allocation for q_min at the planning rate; every
  call starts on c_1; the LLM judge is outside the cluster as Cascadia's GPT-4o is, each grade taking
  0.27 s (Cascadia footnote 4's average).
- Cascade, judge on the pool: the same, but the judge's call (the question, the answer and the scoring
  prompt in, 2 tokens out) runs on the largest model type's engines and the plan counts that load; planned
  at the planning rate, or the largest of its halvings the budget can serve.
- Chimera: the cascade's engines (same GPUs and models), Chimera's routing (learned router and QRF,
  latency slack, program affinity; ``hetflow.learned`` trains them once).

All three use the same engine model, the same SLO base (each program alone on the stand-alone
engines) and capacity at SLO by ``hetflow.bench.capacity``: the highest stable rate with 95% of programs
within ``--slo-scale`` times that base. A run at rate r replays the programs of the seed's trace that
arrive in the first ``--duration`` seconds at r (at least ``MIN_PROGRAMS``), so that every rate is
sustained for as long. Each run reports its quality, queueing share and stability.
"""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass
from multiprocessing import Pool
from typing import Any, Mapping, Sequence

from hetflow.bench.capacity import Probe, SloRule, find_capacity
from hetflow.bench.common import write
from hetflow.bench.sweep import at_rate, servable
from hetflow.core.cascade.config import CascadeConfig, JudgeSpec
from hetflow.core.cascade.modelled_judge import judge_grade
from hetflow.core.engine.profile import EngineSpec, catalog_architecture, catalog_gpu, load_profile
from hetflow.core.presets import resolve
from hetflow.core.trace import StageRecord
from hetflow.planner.bilevel import JudgeLoad, Plan, PlanError, Requirement, plan
from hetflow.planner.deployment import Allocation, LatencyTable, ModelType, Workload, solve
from hetflow.planner.latency import LengthSample, capacity_per_s
from hetflow.planner.routing import SampledRequest, utopia_nadir
from hetflow.planner.sample import sample_from_trace
from hetflow.planner.stack import replica_profile
from hetflow.workloads.generate import generate
from simulator.cascade import SimCascade
from simulator.metrics import summarize
from simulator.run import ProgramResult, Simulation
from simulator.signals import LearnedSignals, Signals

CASCADE = ("qwen2.5-1.5b-instruct", "qwen2.5-7b-instruct", "qwen2.5-14b-instruct")
GPU = "h100-80g"
FAMILIES = ("math", "code")
PLAN_SAMPLE = 200
SIM_REQUESTS = 150
PLANNING_LOAD = 0.7
"""The planning rate: this share of the stand-alone GPUs' fluid capacity."""
JUDGE_SEED = 7
JUDGE_MODEL = CASCADE[-1]
"""The LLM judge runs on the largest model type's engines; the planner counts its calls there."""
ENGINE_POLICY = "hetflow"
"""Engine choice and priorities of the stand-alone model and the cascade (the model is fixed for them:
one model, or the cascade's stage)."""
SYSTEMS = ("stand-alone", "cascade", "cascade-judge-on-pool", "chimera")
OUTSIDE_JUDGE_S = 0.27
"""Cascadia footnote 4: "on average 0.27s for a single judge"."""
MIN_PROGRAMS = 200


@dataclass(frozen=True)
class Setup:
    """What every system of one seed runs on."""

    seed: int
    records: list[StageRecord]
    q_min: float
    utopia: float
    nadir: float
    planning_rate_calls_per_s: float
    calls_per_program: float
    standalone_model: str
    standalone: list[EngineSpec]
    cascade_plan: Plan
    cascade: list[EngineSpec]
    pool_judge_plan: Plan | None
    """None when no halving of the planning rate has a plan with the judge on the pool."""
    pool_judge: list[EngineSpec]
    pool_judge_rate_calls_per_s: float
    learned: LearnedSignals
    duration_s: float
    dropped_programs: int
    """Programs with a call no engine of some system could ever hold (``hetflow.bench.sweep.servable``)."""


def trace(seed: int, programs: int, families: Sequence[str] = FAMILIES) -> list[StageRecord]:
    """The families' programs interleaved, one program per second in all (``at_rate`` scales it)."""
    return [r for f in families for r in generate(f, programs // len(families), seed, models=list(CASCADE),
                                                   rate_per_s=1.0 / len(families))]


def _lengths(sample: Sequence[SampledRequest], model: str) -> tuple[LengthSample, ...]:
    return tuple(LengthSample(r.input_tokens[model], r.output_tokens[model]) for r in sample)


def _engines(allocations: Sequence[Allocation]) -> list[EngineSpec]:
    out = []
    for a in allocations:
        if not a.gpus or a.parallelism is None:
            continue
        profile = replica_profile(a.model, a.gpu, a.parallelism.tp, a.parallelism.pp)
        out += [EngineSpec(f"{a.model}-{i}", a.model, profile) for i in range(a.parallelism.dp)]
    return out


def setup(seed: int, gpus: int, records: list[StageRecord], q_share: float, learned: LearnedSignals,
          duration_s: float, families: Sequence[str] = FAMILIES) -> Setup:
    programs = len({r.program_id for r in records})
    sample = sample_from_trace(trace(seed + 1000, programs, families), list(CASCADE), PLAN_SAMPLE, seed)
    utopia, nadir = utopia_nadir(sample, list(CASCADE))
    q_min = nadir + q_share * (utopia - nadir)
    quality = {m: statistics.mean(r.score[m] for r in sample) for m in CASCADE}
    standalone_model = next(m for m in CASCADE if quality[m] >= q_min)
    one_gpu = capacity_per_s(load_profile(f"{standalone_model}@{GPU}"), _lengths(sample, standalone_model))
    rate = PLANNING_LOAD * gpus * one_gpu
    table = LatencyTable({GPU: catalog_gpu(GPU)}, {GPU: gpus}, sim_requests=SIM_REQUESTS, seed=seed)
    model_types = [ModelType(m, catalog_architecture(m)) for m in CASCADE]
    alone = model_types[CASCADE.index(standalone_model)]
    _, standalone_alloc = solve([alone], [Workload(rate, _lengths(sample, standalone_model))], table)
    cascade_plan = plan(model_types, sample, rate, table, Requirement(q_min=q_min))
    pool_judge_plan, pool_rate = _plan_with_judge(model_types, sample, rate, table, q_min)
    engines = {"stand-alone": _engines(standalone_alloc), "cascade": _engines(cascade_plan.allocations),
               "pool": _engines(pool_judge_plan.allocations) if pool_judge_plan else []}
    kept, dropped = servable(records, [e for es in engines.values() for e in es])  # every system can hold them
    return Setup(seed, kept, q_min, utopia, nadir, rate, len(records) / programs, standalone_model,
                 engines["stand-alone"], cascade_plan, engines["cascade"], pool_judge_plan, engines["pool"], pool_rate,
                 learned, duration_s, len(dropped))


def _plan_with_judge(model_types: list[ModelType], sample: list[SampledRequest], rate: float, table: LatencyTable,
                     q_min: float, halvings: int = 4) -> tuple[Plan | None, float]:
    """The plan with the judge's load at the highest of rate, rate/2, ... the budget serves, and that rate."""
    for k in range(halvings + 1):
        try:
            return plan(model_types, sample, rate / 2**k, table, Requirement(q_min=q_min),
                        JudgeLoad(JUDGE_MODEL)), rate / 2**k
        except PlanError:
            continue
    return None, 0.0


def _quality(results: Sequence[ProgramResult], records: Sequence[StageRecord], sim: Simulation) -> float:
    """Mean judge grade of every call's final answer (Cascadia's Q)."""
    by_call = {(r.program_id, r.stage_index): r for r in records}
    grades = []
    for result in results:
        for stage, call in result.calls.items():
            model = sim.engines[call.engine_id].model
            record = by_call[(result.program_id, stage)]
            grades.append(judge_grade(record.correct[model], record.program_id, stage, model, JUDGE_SEED))
    return statistics.mean(grades)


def _sim_cascade(chosen: Plan, outside_judge_s: float | None) -> SimCascade | None:
    """The plan's cascade: its model types with GPUs, each but the last with its threshold."""
    models = tuple(a.model for a in chosen.allocations if a.gpus)
    thresholds = tuple(h for a, h in zip(chosen.allocations, chosen.thresholds) if a.gpus)[:len(models) - 1]
    if len(models) < 2:
        return None
    judge = JudgeSpec(kind="llm", model=JUDGE_MODEL)
    return SimCascade(CascadeConfig(models, thresholds, judge), judge_seed=JUDGE_SEED, outside_judge_s=outside_judge_s)


def replayed(s: Setup, rate_programs_per_s: float) -> list[StageRecord]:
    """The trace's programs arriving within ``duration_s`` at the rate (the trace is generated at one
    program per second), at least ``MIN_PROGRAMS``."""
    starts = sorted({(r.arrival_s, r.program_id) for r in s.records})
    horizon = max(rate_programs_per_s * s.duration_s, starts[min(MIN_PROGRAMS, len(starts)) - 1][0])
    kept = {pid for arrival, pid in starts if arrival <= horizon}
    return [r for r in s.records if r.program_id in kept]


def simulate(s: Setup, system: str, rate_programs_per_s: float, slo_scale: float) -> dict[str, Any]:
    if system == "chimera":
        sim = Simulation.from_preset(s.cascade, resolve("chimera"), Signals("learned", "learned", learned=s.learned),
                                     reference_engines=s.standalone)
    else:
        preset = resolve(ENGINE_POLICY)
        cascade, engines = None, s.standalone
        if system.startswith("cascade"):
            on_pool = system == "cascade-judge-on-pool"
            chosen = s.pool_judge_plan if on_pool else s.cascade_plan
            assert chosen is not None
            engines = s.pool_judge if on_pool else s.cascade
            cascade = _sim_cascade(chosen, None if on_pool else OUTSIDE_JUDGE_S)
        sim = Simulation.from_preset(engines, preset, Signals("prior", "oracle"), cascade=cascade,
                                     reference_engines=s.standalone)
    records = replayed(s, rate_programs_per_s)
    results = sim.run(at_rate(records, rate_programs_per_s))
    summary = summarize(results, (), slo_scale)
    summary["trace_exhausted"] = len(records) == len(s.records)
    summary["rejected_calls"] = len(sim.rejected)
    summary["quality"] = _quality(results, records, sim) if results else None
    if sim.cascade is not None:
        summary["escalated_share"] = (sum(o == "escalated" for *_, o in sim.cascade_stages)
                                      / max(1, len(s.records)))
    return summary


def capacity(s: Setup, system: str, rule: SloRule) -> dict[str, Any]:
    """Capacity at SLO, and the run at the planning rate (its smallest SLO scale with 95% attainment)."""
    def probe(rate: float) -> Probe:
        summary = simulate(s, system, rate, rule.slo_scale)
        failures = rule.failures(summary)
        return Probe(rate, not failures, {k: v for k, v in summary.items() if k != "latencies_s"}, failures)

    planning_rate = s.planning_rate_calls_per_s / s.calls_per_program
    found = find_capacity(probe, planning_rate, rel_tol=0.05)
    at_capacity = next((p.summary for p in found.probes if p.rate_per_s == found.rate_per_s), {})
    at_plan = simulate(s, system, planning_rate, rule.slo_scale)
    return {"system": system, "seed": s.seed, "capacity_programs_per_s": found.rate_per_s,
            "failed_above_per_s": found.failed_above_per_s, "trace_bound": found.trace_bound,
            "at_capacity": _brief(at_capacity), "at_planning_rate": {"rate_programs_per_s": planning_rate,
                                                                    **_brief(at_plan)},
            "probes": [{"rate": p.rate_per_s, "passed": p.passed, "failures": list(p.failures)} for p in found.probes]}


def _brief(summary: Mapping[str, Any]) -> dict[str, Any]:
    if not summary.get("programs"):
        return {}
    return {"quality": summary["quality"], "accuracy": summary["task_score"],
            "slo_scale_for_95pct": summary["slo"]["scale_for_95pct"], "within_slo_share": summary["within_slo_share"],
            "p95_s": summary["latency_s"]["p95"], "queueing_share": summary["queueing_share"],
            "stable": summary["steady_stability"]["stable"], "models": summary["models"],
            "escalated_share": summary.get("escalated_share"), "programs": summary["programs"],
            "trace_exhausted": summary["trace_exhausted"]}


def _task(args: tuple[Setup, str, SloRule]) -> dict[str, Any]:
    return capacity(*args)


def _learned(records: list[StageRecord]) -> LearnedSignals:
    from hetflow.bench.learned_signals import learned_signals
    from hetflow.learned import ensure_trained

    router_dir, predictor_dir = ensure_trained(list(CASCADE))
    return learned_signals(records, list(CASCADE), router_dir, predictor_dir)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--gpus", type=int, default=8, help="H100s (Cascadia 4.1: 4 nodes of 8; here one node)")
    parser.add_argument("--programs", type=int, default=2400, help="programs per trace")
    parser.add_argument("--duration", type=float, default=40.0, help="seconds of arrivals per run")
    parser.add_argument("--q-share", type=float, default=0.5, help="q_min between nadir (0) and utopia (1)")
    parser.add_argument("--slo-scale", type=float, default=5.0)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--families", default=",".join(FAMILIES), help="workload families (hetflow.workloads)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default="cascade", help="report name: bench_out/<name>.json")
    args = parser.parse_args(argv)
    rule = SloRule(slo_scale=args.slo_scale)
    setups = []
    for seed in (int(x) for x in args.seeds.split(",")):
        families = args.families.split(",")
        records = trace(seed, args.programs, families)
        systems = args.systems.split(",")
        setups.append(setup(seed, args.gpus, records, args.q_share,
                            _learned(records) if "chimera" in systems else LearnedSignals(), args.duration, families))
        s = setups[-1]
        onpool = s.pool_judge_plan
        print(f"seed {seed}: q_min {s.q_min:.2f} (nadir {s.nadir:.2f}, utopia {s.utopia:.2f}); stand-alone "
              f"{s.standalone_model} on {len(s.standalone)} engines; planning rate {s.planning_rate_calls_per_s:.1f} "
              f"calls/s; cascade: thresholds {[round(h, 1) for h in s.cascade_plan.thresholds]}, GPUs "
              f"{[a.gpus for a in s.cascade_plan.allocations]}, planned quality {s.cascade_plan.quality:.2f}; judge "
              f"on the pool: " + (f"at {s.pool_judge_rate_calls_per_s:.1f} calls/s, thresholds "
                                  f"{[round(h, 1) for h in onpool.thresholds]}, GPUs "
                                  f"{[a.gpus for a in onpool.allocations]}, planned quality {onpool.quality:.2f}"
                                  if onpool else "no plan"), flush=True)
    tasks = [(s, system, rule) for s in setups for system in args.systems.split(",")
             if system != "cascade-judge-on-pool" or s.pool_judge_plan is not None]
    with Pool(args.workers) as pool:
        runs = []
        for run in pool.imap_unordered(_task, tasks):
            runs.append(run)
            print(f"{run['system']} seed {run['seed']}: capacity {run['capacity_programs_per_s']:.2f} programs/s, "
                  f"at planning rate {run['at_planning_rate']}", flush=True)
    report: dict[str, Any] = {"rule": {"gpus": args.gpus, "programs": args.programs, "duration_s": args.duration,
                                       "q_share": args.q_share,
                       "slo_scale": args.slo_scale, "attainment": rule.attainment, "families": args.families.split(","),
                       "cascade": CASCADE, "planning_load": PLANNING_LOAD},
              "setups": [{"seed": s.seed, "q_min": s.q_min, "utopia": s.utopia, "nadir": s.nadir,
                          "standalone_model": s.standalone_model, "standalone_engines": len(s.standalone),
                          "thresholds": s.cascade_plan.thresholds, "planned_quality": s.cascade_plan.quality,
                          "cascade_gpus": {a.model: [a.gpus, str(a.parallelism)] for a in s.cascade_plan.allocations},
                          "pool_judge": {"rate_calls_per_s": s.pool_judge_rate_calls_per_s,
                                         "thresholds": s.pool_judge_plan.thresholds,
                                         "planned_quality": s.pool_judge_plan.quality,
                                         "gpus": {a.model: [a.gpus, str(a.parallelism)]
                                                  for a in s.pool_judge_plan.allocations}}
                          if s.pool_judge_plan else None,
                          "planning_rate_calls_per_s": s.planning_rate_calls_per_s,
                          "dropped_programs": s.dropped_programs} for s in setups],
              "runs": sorted(runs, key=lambda r: (r["system"], r["seed"])), "summary": summary(runs)}
    write(args.out, report)
    for system, v in report["summary"].items():
        print(f"{system}: {v}")
    return 0


def summary(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per system: median and range over seeds of capacity, SLO scale at the planning rate and quality."""
    out = {}
    for system in sorted({r["system"] for r in runs}):
        mine = [r for r in runs if r["system"] == system]

        def spread(values: list[float]) -> dict[str, float]:
            return {"median": statistics.median(values), "min": min(values), "max": max(values)}
        out[system] = {"capacity_programs_per_s": spread([r["capacity_programs_per_s"] for r in mine]),
                       "slo_scale_at_planning_rate": spread([r["at_planning_rate"].get("slo_scale_for_95pct",
                                                                                       float("inf")) for r in mine]),
                       "quality_at_planning_rate": spread([r["at_planning_rate"].get("quality") or 0.0 for r in mine])}
    return out


if __name__ == "__main__":
    raise SystemExit(main())
