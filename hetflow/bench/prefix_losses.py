"""Where a run's prefix hits went: the prompt tokens each kind of call prefilled, and why.

Issue 35 asks that a missed capacity target be explained by the probes. On the agent family every call
of a program repeats its program's context, so a call that runs where its program's previous call ran
should find all of it cached and prefill only what the tool and the next message added. This tool
plays one probe of a sweep and sorts its calls:

- **first**: a program's first call (its prompt's shared head at best is cached);
- **same engine**: the engine of its program's previous call (by dispatch), which held its context;
  split by the share of its prompt found cached: at least 60% (the context was there), 20-60% (part of
  it was evicted) and under 20% (all of it was);
- **moved**: another engine, where its context had to be prefilled again.

It then sorts the programs by exclusive latency into ten deciles and says, for each, how many missed
the SLO, their mean slowdown, and the shares of the decile's latency its programs spent held in the
balancer for KV room (the working-set gate) and queued in engines (the rest ran, or waited in tools;
each program's waits taken as a union of intervals, so parallel stages waiting together count once).
Deciles late with most of their time held at the gate were kept out of a KV that working sets filled.

A run whose same-engine calls prefill far more than the new part of their prompts has working sets that
outgrew the KV: the prefix cache evicted contexts that were about to come back (docs/results.md,
"Working sets counted with their growth"). The KV holds the retention stage gave end by a next call
(``resumed``), by time (``expired``) or to make room (``pressure``). A call's cached tokens are summed
over its admissions, so a preempted call that found its prefix again counts as cached; the run's
preemptions are in the sweep's own figures.

    python -m hetflow.bench.prefix_losses --sweep bench/sweeps/capacity-agent.yaml --policy hetflow \\
        --seed 3 --rate 0.711
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from hetflow.core.stats import union_length_s
from simulator.run import ProgramResult

CACHED_BUCKETS = ((0.6, "same engine, >= 60% cached"), (0.2, "same engine, 20-60% cached"),
                  (0.0, "same engine, < 20% cached"))
"""The least share of its prompt a same-engine call found cached, and its row."""


@dataclass(frozen=True)
class LossRow:
    """The calls of one kind and their prompt tokens."""

    calls: int = 0
    prompt_tokens: int = 0
    prefilled_tokens: int = 0
    """Prompt tokens not found cached: what the engine computed."""

    def add(self, prompt_tokens: int, hit_tokens: int) -> LossRow:
        return LossRow(self.calls + 1, self.prompt_tokens + prompt_tokens,
                       self.prefilled_tokens + max(0, prompt_tokens - hit_tokens))


def call_kind(prompt_tokens: int, hit_tokens: int, first: bool, moved: bool) -> str:
    """The row of a call: first, moved, or on its program's engine by the share of its prompt cached."""
    if first:
        return "first"
    if moved:
        return "moved"
    cached = min(1.0, hit_tokens / prompt_tokens) if prompt_tokens else 1.0
    return next(label for least, label in CACHED_BUCKETS if cached >= least)


def prefix_losses(results: Iterable[ProgramResult]) -> dict[str, LossRow]:
    """Every answered call of the run, sorted into ``call_kind``'s rows (each program's calls in dispatch
    order)."""
    rows: dict[str, LossRow] = {}
    for result in results:
        previous_engine = None
        for call in sorted(result.calls.values(), key=lambda c: (c.dispatched_s, c.stage_index)):
            kind = call_kind(call.prompt_tokens, call.prefix_hit_tokens, previous_engine is None,
                             previous_engine not in (None, call.engine_id))
            rows[kind] = rows.get(kind, LossRow()).add(call.prompt_tokens, call.prefix_hit_tokens)
            previous_engine = call.engine_id
    return rows


def table(rows: dict[str, LossRow], released: Mapping[str, int]) -> str:
    """The rows as markdown, then the run's prefix hits and how its KV holds ended."""
    total = sum(r.prompt_tokens for r in rows.values()) or 1
    lines = ["| calls | count | prompt tokens | prefilled tokens | prefilled, share of all prompt tokens |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for kind in ("first", *(label for _, label in CACHED_BUCKETS), "moved"):
        row = rows.get(kind, LossRow())
        lines.append(f"| {kind} | {row.calls:,} | {row.prompt_tokens:,} | {row.prefilled_tokens:,} "
                     f"| {row.prefilled_tokens / total:.1%} |")
    hits = 1.0 - sum(r.prefilled_tokens for r in rows.values()) / total
    lines.append(f"\nprefix hits {hits:.1%}; KV holds ended: "
                 + ", ".join(f"{why} {n:,}" for why, n in sorted(released.items())))
    return "\n".join(lines)


@dataclass(frozen=True)
class LateRow:
    """The programs of one decile of exclusive latency, and where their time went."""

    decile: int
    """1 for the programs of shortest exclusive latency, 10 for the longest."""
    programs: int
    late: int
    mean_exclusive_s: float
    mean_slowdown: float
    held_share: float
    """Of their latency, the share their calls were held in the balancer for KV room."""
    engine_queue_share: float
    """Of their latency, the share their calls waited in engine queues (or preempted)."""


def late_by_decile(results: Sequence[ProgramResult], slo_scale: float) -> list[LateRow]:
    """The programs sorted by exclusive latency and cut into ten groups of as near equal size as their
    count allows (empty ones left out): how many finished later than ``slo_scale`` times their
    exclusive latency, and where the group's time went."""
    ordered = sorted(results, key=lambda r: r.isolated_s)
    rows = []
    for decile in range(1, 11):
        group = ordered[(decile - 1) * len(ordered) // 10:decile * len(ordered) // 10]
        if not group:
            continue
        latency_s = sum(r.latency_s for r in group) or 1.0
        held_s = sum(union_length_s(i for c in r.calls.values() for i in c.held_intervals_s) for r in group)
        queued_s = sum(r.queued_s for r in group)
        rows.append(LateRow(decile, len(group), sum(r.latency_s > slo_scale * r.isolated_s for r in group),
                            sum(r.isolated_s for r in group) / len(group),
                            sum(r.latency_s / r.isolated_s for r in group) / len(group),
                            held_s / latency_s, (queued_s - held_s) / latency_s))
    return rows


def late_table(rows: Sequence[LateRow]) -> str:
    """``late_by_decile``'s rows as markdown."""
    lines = ["| decile of exclusive latency | programs | mean exclusive s | late | mean slowdown "
             "| held for KV room | queued in engines |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in rows:
        lines.append(f"| {row.decile} | {row.programs:,} | {row.mean_exclusive_s:.1f} | {row.late:,} "
                     f"| {row.mean_slowdown:.2f} | {row.held_share:.0%} | {row.engine_queue_share:.0%} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweep", type=Path, required=True, help="the sweep's YAML: cluster, trace, signals")
    parser.add_argument("--policy", required=True, help="a policy of the sweep, or any named policy")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--rate", type=float, required=True, help="programs/s")
    args = parser.parse_args(argv)
    from hetflow.bench.sweep import Sweep, SweepSpec, at_rate, retained_kv_released, simulation
    from hetflow.bench.sweep_cli import learned_source
    from hetflow.core.presets import resolve

    spec = SweepSpec.from_yaml(args.sweep)
    spec = replace(spec, seeds=(args.seed,))
    sweep = Sweep(spec, learned_source(spec), workers=1)
    sim = simulation(sweep.engines, resolve(args.policy), sweep.signals[args.seed], spec.slo_scales,
                     identity=spec.identity)
    results = sim.run(at_rate(sweep.traces[args.seed], args.rate), isolated_s=sweep.isolated_s(args.seed))
    late = sum(r.latency_s > spec.slo_rule.slo_scale * r.isolated_s for r in results)
    print(f"{args.policy} on {spec.name}, seed {args.seed}, {args.rate:g} programs/s: {len(results):,} programs, "
          f"{late:,} later than {spec.slo_rule.slo_scale:g}x their exclusive latency\n")
    print(table(prefix_losses(results), retained_kv_released(sim)))
    print("\n" + late_table(late_by_decile(results, spec.slo_rule.slo_scale)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
