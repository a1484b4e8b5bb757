"""Which programs miss the SLO at a rate, by their exclusive latency (docs/results.md, "Why the agent family
stops short: the probes"): one run of a sweep's policy on one seed's trace at one rate, as a capacity
probe runs it, and for each tenth of the programs by exclusive latency (shortest first) how many finished
past ``slo_scale`` times it, their mean slowdown (latency over exclusive latency), mean time queued and
mean calls; then the misses by fifth of arrival, and where the programs past the SLO and those within it
spent their time (held at the balancer's gate for KV room, queued at the engine, prefill, decode).

    python scripts/slo_misses_by_size.py --sweep bench/sweeps/frontier-agent-l4.yaml --seed 1 --rate 0.95
        [--policy hetflow]

Several rates, comma-separated, run one after another on the same trace (a policy's verdicts around its
capacity, where they need not be monotone).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from pathlib import Path
from typing import Sequence

from hetflow.bench.sweep import Sweep, SweepSpec, at_rate, simulation
from hetflow.bench.sweep_cli import learned_source
from hetflow.core.presets import resolve
from simulator.metrics import summarize
from simulator.run import ProgramResult


def tenths(results: Sequence[ProgramResult], slo_scale: float) -> list[str]:
    by_size = sorted(results, key=lambda r: r.isolated_s)
    n, lines = len(by_size), []
    for d in range(10):
        part = by_size[d * n // 10:(d + 1) * n // 10]
        lines.append(
            f"tenth {d}: exclusive {part[0].isolated_s:.1f}-{part[-1].isolated_s:.1f} s, "
            f"{sum(r.latency_s > slo_scale * r.isolated_s for r in part)} past the SLO, "
            f"slowdown {statistics.mean(r.latency_s / r.isolated_s for r in part):.2f}, "
            f"queued {statistics.mean(r.queued_s for r in part):.1f} s, "
            f"calls {statistics.mean(len(r.calls) for r in part):.1f}")
    return lines


def time_spent(results: Sequence[ProgramResult]) -> str:
    """Mean seconds a program spent held at the gate, queued at its engines, prefilling and decoding,
    summed over its calls (``SimulatedCall``'s intervals; tool time and parallel branches not split)."""
    def held_s(r: ProgramResult) -> float:
        return sum(end - start for c in r.calls.values() for start, end in c.held_intervals_s)
    parts = {
        "latency": lambda r: r.latency_s,
        "exclusive": lambda r: r.isolated_s,
        "held at the gate": held_s,
        "engine queue": lambda r: sum(c.queued_s for c in r.calls.values()) - held_s(r),
        "prefill": lambda r: sum(max(0.0, c.first_token_s - c.first_scheduled_s) for c in r.calls.values()),
        "decode": lambda r: sum(max(0.0, c.finished_s - c.first_token_s) for c in r.calls.values()),
    }
    return ", ".join(f"{name} {statistics.mean(part(r) for r in results):.1f} s" for name, part in parts.items()) \
        if results else "none"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sweep", required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rate", required=True, help="programs per second, or several comma-separated")
    p.add_argument("--policy", default="hetflow")
    args = p.parse_args()
    spec = dataclasses.replace(SweepSpec.from_yaml(Path(args.sweep)), seeds=(args.seed,))
    sweep = Sweep(spec, learned_source(spec), workers=1)
    for rate_per_s in (float(r) for r in args.rate.split(",")):
        report(sweep, args.policy, args.seed, rate_per_s)


def report(sweep: Sweep, policy: str, seed: int, rate_per_s: float) -> None:
    """One run of ``policy`` on the seed's trace at ``rate_per_s``: its verdict, then the misses by size, by
    arrival and where they spent their time."""
    spec = sweep.spec
    sim = simulation(sweep.engines, resolve(policy), sweep.signals[seed], spec.slo_scales, True, spec.identity)
    results = sorted(sim.run(at_rate(sweep.traces[seed], rate_per_s), isolated_s=sweep.isolated_s(seed)),
                     key=lambda r: r.arrival_s)
    slo_scale = spec.slo_rule.slo_scale
    summary = summarize(results, sim.decision_ms, slo_scale)
    print(f"{policy} at {rate_per_s}/s, seed {seed}: {summary['within_slo_share']:.2%} within {slo_scale}x, "
          f"P95 {summary['latency_s']['p95']:.1f} s, {summary['queueing_share']:.1%} queued, "
          f"{summary['preemptions']} preemptions, prefix hits {sim.prefix_hit_rate:.1%}")
    print("\n".join(tenths(results, slo_scale)))
    n = len(results)
    print("past the SLO by fifth of arrival:",
          [sum(r.latency_s > slo_scale * r.isolated_s for r in results[f * n // 5:(f + 1) * n // 5]) for f in range(5)])
    print("past the SLO, mean:", time_spent([r for r in results if r.latency_s > slo_scale * r.isolated_s]))
    print("within it, mean:", time_spent([r for r in results if r.latency_s <= slo_scale * r.isolated_s]))


if __name__ == "__main__":
    main()
