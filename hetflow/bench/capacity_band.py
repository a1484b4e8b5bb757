"""Capacity's assumption checked below each searched figure.

``find_capacity`` bisects on the assumption that a rate that fails, every higher rate fails too. Near the
edge that need not hold: whether a queue forms, or a policy without admission control falls into KV
thrash, can turn on the arrivals' details rather than on the rate, and a bisection then stops at a rate
that passed with failures below it. This runs a fixed grid of rates under each searched capacity (``steps``
rates, ``step_share`` of it apart) with the sweep's own probe and rule, and reports the lower envelope: the
highest rate at and below which every probed rate passed (the searched rate itself when the whole grid
passes). The grid is fixed before any run; the same for every policy.

    python -m hetflow.bench.capacity_band --sweep bench/sweeps/frontier-agent-hetero.yaml --seeds 2
        --policies hetflow,vllm-router-program:session_header=true [--steps 10 --step-share 0.01]
        [-o bench_out/band-agent-hetero.jsonl]

Each (policy, seed) is appended to the output as it ends and skipped when already there (a run resumed).
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any, Sequence

from hetflow.bench.capacity import Probe
from hetflow.bench.common import append_json_line, json_lines


def grid_rates_per_s(capacity_per_s: float, steps: int, step_share: float) -> list[float]:
    """The rates probed under a searched capacity, ascending: capacity x (1 - k x step_share), k = steps..1."""
    if capacity_per_s <= 0 or steps < 1 or not 0 < step_share * steps < 1:
        raise ValueError(f"a band needs a capacity > 0 and 0 < steps x step_share < 1, got "
                         f"{capacity_per_s}, {steps}, {step_share}")
    return [capacity_per_s * (1 - k * step_share) for k in range(steps, 0, -1)]


def lower_envelope_per_s(capacity_per_s: float, grid: Sequence[Probe]) -> float | None:
    """The highest rate at and below which every probe passed: the searched capacity when the whole grid
    passed, the last grid rate before the first failure otherwise, None when the grid's lowest rate failed."""
    passed_below = None
    for probe in sorted(grid, key=lambda p: p.rate_per_s):
        if not probe.passed:
            return passed_below
        passed_below = probe.rate_per_s
    return capacity_per_s


def band_line(policy: str, seed: int, capacity_per_s: float, step_share: float,
              grid: Sequence[Probe]) -> dict[str, Any]:
    """One (policy, seed)'s output line: its searched capacity, the grid's verdicts and the lower envelope."""
    envelope_per_s = lower_envelope_per_s(capacity_per_s, grid)
    return {"policy": policy, "seed": seed, "capacity_per_s": capacity_per_s, "steps": len(grid),
            "step_share": step_share, "lower_envelope_per_s": envelope_per_s,
            "envelope_share": None if envelope_per_s is None else envelope_per_s / capacity_per_s,
            "grid": [{"rate_per_s": p.rate_per_s, "passed": p.passed, "failures": list(p.failures),
                      "within_slo_share": p.summary.get("within_slo_share"),
                      "queueing_share": p.summary.get("queueing_share"),
                      "prefix_hit_rate": p.summary.get("prefix_hit_rate")} for p in grid]}


def describe(line: dict[str, Any]) -> str:
    """A line as one row of text: the searched figure, the envelope and each grid rate (x: failed)."""
    marks = " ".join(f"{g['rate_per_s']:.4g}{'' if g['passed'] else 'x'}" for g in line["grid"])
    envelope_per_s = line["lower_envelope_per_s"]
    held = "below the grid" if envelope_per_s is None else f"{envelope_per_s:.4g} ({line['envelope_share']:.1%})"
    return f"{line['policy']} seed {line['seed']}: searched {line['capacity_per_s']:.4g}, envelope {held}; {marks}"


def done_grids(out: Path | None) -> set[tuple[str, int, int, float]]:
    """The (policy, seed, steps, step share) already in the output."""
    return {(line["policy"], line["seed"], line.get("steps"), line.get("step_share"))
            for line in (json_lines(out) if out else ())}


def main(argv: Sequence[str] | None = None) -> None:
    from hetflow.bench.sweep import Sweep, SweepSpec, read_journal
    from hetflow.bench.sweep_cli import learned_source
    from hetflow.core.presets import split_specs

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sweep", required=True, type=Path)
    p.add_argument("--seeds", required=True, help="comma-separated")
    p.add_argument("--policies", required=True, help="comma-separated, each searched in the journal")
    p.add_argument("--journal", type=Path, help="default bench/journals/<the sweep's name>.jsonl")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--step-share", type=float, default=0.01)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("-o", "--out", type=Path, help="JSON lines, one per (policy, seed); resumed from")
    args = p.parse_args(argv)
    seeds = tuple(int(s) for s in args.seeds.split(","))
    spec = dataclasses.replace(SweepSpec.from_yaml(args.sweep), seeds=seeds)
    journal = read_journal(args.journal or Path("bench/journals") / f"{spec.name}.jsonl", spec)
    tasks = [(policy, seed) for seed in seeds for policy in split_specs(args.policies)]
    if missing := [t for t in tasks if t not in journal]:
        raise SystemExit(f"no search in the journal for this rule: {missing}")
    done = done_grids(args.out)
    todo = [t for t in tasks if (*t, args.steps, args.step_share) not in done]
    sweep = Sweep(spec, learned_source(spec), workers=args.workers, stop_settled=True)
    for policy, seed in todo:
        capacity_per_s = journal[(policy, seed)].rate_per_s
        rates_per_s = grid_rates_per_s(capacity_per_s, args.steps, args.step_share)
        grid = list(sweep.probe_all([(policy, seed, r) for r in rates_per_s]))
        line = band_line(policy, seed, capacity_per_s, args.step_share, grid)
        print(describe(line), flush=True)
        if args.out:
            append_json_line(args.out, line)


if __name__ == "__main__":
    main()
