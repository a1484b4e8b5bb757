"""The latency floor of a sweep: the least latency any schedule could give each program, at any load.

Issue 35 asks for a P95 at 80% of vLLM's router's capacity 1.3x lower than the router's, and that a
missed target be explained by the probes. The work ceiling (``hetflow.bench.ceiling``) bounds capacity;
this bounds latency. A program's floor is its critical path with every call at its fastest:

- alone on an engine (``EngineProfile.isolated_request_s``: a prefill of one call, then one decode
  iteration per token at batch 1, the smallest iteration the profile has), on whichever engine of the
  pool serves that call fastest;
- with the ideal prefix cache of the work ceiling (``ceiling.ideal_cache_work``): the longest prefix any
  earlier call had, the shared system prompt and the program's own earlier prompts and outputs, cached;
- after each stage's tool time, once the stages it depends on have ended (a first stage starts at the
  program's arrival, as the simulator starts it).

Two assumptions, both met by the shipped traces: the ideal cache fills in arrival order (a program's
calls in stage order), so a prompt part is cached for the calls that arrive after its first one; and on
a pool of several models a call's cached prefix and prompt are counted in one model's tokens at a time,
as if every earlier output of its program came from that model.

Every schedule's latency for a program is at least its floor, so every quantile of a run's latencies over
a set of programs is at least that quantile of their floors (each order statistic of a set dominated
term by term is dominated). A policy's P95 over the floor's P95 is the most any schedule could cut that
P95 by, at that load or any other. The longest decile is the simulator's (``simulator.metrics``): the
tenth of programs with the longest exclusive latency.

    python -m hetflow.bench.latency_floor --sweep bench/sweeps/p95-agent-vllm-router.yaml \
        [--results <sweep output>/results.json]
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from hetflow.bench.ceiling import seed_row, seed_table_head, sweep_main
from hetflow.bench.cluster import cluster_from_stack, models_of
from hetflow.bench.work_ceiling import CallWork, ideal_cache_work
from hetflow.core.engine.profile import EngineProfile, EngineSpec
from hetflow.core.stats import percentile
from hetflow.core.trace import StageRecord, programs
from hetflow.runtime.config import load_stack
from simulator.metrics import longest_decile
from simulator.run import reference_latencies

if TYPE_CHECKING:
    from hetflow.bench.sweep import SweepSpec


def fastest_call_s(call: CallWork, profiles: Sequence[EngineProfile]) -> float:
    """The call alone on the fastest of ``profiles`` (one model's), its cached prefix from the ideal cache."""
    prompt = call.new_tokens + call.cached_tokens
    return min(p.isolated_request_s(prompt, call.output_tokens, call.cached_tokens) for p in profiles)


def latency_floors_s(records: Sequence[StageRecord], engines: Sequence[EngineSpec]) -> dict[str, float]:
    """Program id -> its latency floor (module docstring): the critical path of its calls, each after its
    tool time and at the least time any engine of the pool could serve it in."""
    kinds: dict[str, list[EngineProfile]] = {}
    for engine in engines:
        if engine.profile not in kinds.setdefault(engine.model, []):
            kinds[engine.model].append(engine.profile)
    work = {model: ideal_cache_work(records, model) for model in kinds}
    floors = {}
    for program_id, group in programs(records).items():
        done_at: dict[int, float] = {}
        for k, record in enumerate(group):
            call_s = min(fastest_call_s(work[model][program_id][k], profiles) for model, profiles in kinds.items())
            start_s = max(done_at[d] for d in record.depends_on) + record.tool_s if record.depends_on else 0.0
            done_at[record.stage_index] = start_s + call_s
        floors[program_id] = max(done_at.values())
    return floors


def floor_quantiles_s(floors: dict[str, float], exclusive_s: dict[str, float]) -> dict[str, float]:
    """The floors' P95 over every program and over the longest decile (by exclusive latency, as
    ``simulator.metrics.summarize`` picks it)."""
    decile = longest_decile(list(floors), lambda p: exclusive_s[p])
    return {"p95_s": percentile(list(floors.values()), 0.95),
            "longest_decile_p95_s": percentile([floors[p] for p in decile], 0.95)}


def sweep_floors(spec: SweepSpec) -> dict[int, dict[str, float]]:
    """Per seed of the sweep: ``floor_quantiles_s`` of its servable trace on its cluster."""
    from hetflow.bench.sweep import load_trace, servable

    engines = cluster_from_stack(load_stack(Path(spec.cluster)))
    out = {}
    for seed in spec.seeds:
        records = servable(load_trace(spec, seed, models_of(engines)), engines)[0]
        exclusive = reference_latencies(programs(records).values(), engines)
        out[seed] = floor_quantiles_s(latency_floors_s(records, engines), exclusive)
    return out


def table(spec: SweepSpec, floors: dict[int, dict[str, float]], results: dict[str, Any] | None) -> str:
    seeds = list(spec.seeds)
    lines = seed_table_head("latency floor", spec)
    for key, label in (("p95_s", "P95"), ("longest_decile_p95_s", "longest decile's P95")):
        lines.append(seed_row(f"floor: {label}, s", [floors[s][key] for s in seeds], "{:.1f}"))
    for (policy, load), runs in _by_policy_and_load((results or {}).get("runs", []), seeds).items():
        for key, label in (("p95_s", "P95"), ("longest_decile_p95_s", "longest decile's P95")):
            ratios = [_measured(runs[s], key) / floors[s][key] for s in seeds]
            lines.append(seed_row(f"{policy} at {load}: {label} / floor", ratios, "{:.2f}x"))
    return "\n".join(lines)


def _by_policy_and_load(runs: list[dict[str, Any]], seeds: list[int]) -> dict[tuple[str, str], dict[int, Any]]:
    """Runs of a fixed-rate sweep grouped by policy and load, each with every seed of the sweep."""
    grouped: dict[tuple[str, str], dict[int, Any]] = {}
    for run in runs:
        grouped.setdefault((run["policy"], run["load"]), {})[run["seed"]] = run
    return {key: by_seed for key, by_seed in grouped.items() if all(s in by_seed for s in seeds)}


def _measured(run: dict[str, Any], key: str) -> float:
    """A run's figure under the floor's key: its P95 or its longest decile's P95."""
    return float(run["latency_s"]["p95"] if key == "p95_s" else run[key])


def main(argv: Sequence[str] | None = None) -> int:
    return sweep_main(argv, __doc__.split("\n\n")[0],
                      "a results.json of the same sweep: each policy's P95 as a multiple of the floor's",
                      lambda spec, results: table(spec, sweep_floors(spec), results))


if __name__ == "__main__":
    raise SystemExit(main())
