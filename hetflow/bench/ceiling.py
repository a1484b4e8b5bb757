"""The work ceiling of a sweep, per seed: the highest rate any policy could serve its trace at on its
cluster (``hetflow.bench.work_ceiling`` says how it is bounded), and each policy's capacity as a share of it.

    python -m hetflow.bench.ceiling --sweep bench/sweeps/capacity-agent-vllm-router.yaml \
        [--results <sweep output>/results.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any, Callable, Sequence

from hetflow.bench.cluster import cluster_from_stack, models_of
from hetflow.bench.sweep import SweepSpec, load_trace, servable
from hetflow.bench.work_ceiling import trace_ceiling
from hetflow.runtime.config import load_stack


def sweep_ceilings(spec: SweepSpec) -> dict[int, dict[str, float]]:
    """Per seed of the sweep: ``trace_ceiling`` of its servable trace."""
    engines = cluster_from_stack(load_stack(Path(spec.cluster)))
    return {seed: trace_ceiling(servable(load_trace(spec, seed, models_of(engines)), engines)[0], engines)
            for seed in spec.seeds}


def seed_table_head(bound: str, spec: SweepSpec) -> list[str]:
    """The title and header of a table with a column per seed of the sweep and one for their mean."""
    seeds = list(spec.seeds)
    return [f"## {bound}: {spec.name} ({spec.cluster}, {spec.trace}), seeds {seeds}", "",
            "| | " + " | ".join(f"seed {s}" for s in seeds) + " | mean |", "|---|" + "---|" * (len(seeds) + 1)]


def seed_row(label: str, values: Sequence[float], fmt: str) -> str:
    """One row of ``seed_table_head``'s table: each seed's value, then their mean, in ``fmt``."""
    return (f"| {label} | " + " | ".join(fmt.format(v) for v in values)
            + f" | {fmt.format(statistics.fmean(values))} |")


def table(spec: SweepSpec, ceilings: dict[int, dict[str, float]], results: dict[str, Any] | None) -> str:
    seeds = list(spec.seeds)
    lines = seed_table_head("work ceiling", spec)
    lines.append(seed_row("ceiling, programs/s", [ceilings[s]["ceiling_per_s"] for s in seeds], "{:.3f}"))
    lines.append(seed_row("ideal prefix hit rate", [ceilings[s]["ideal_hit_rate"] for s in seeds], "{:.0%}"))
    for cap in (results or {}).get("capacity", []):
        shares = [c / ceilings[s]["ceiling_per_s"] for c, s in zip(cap["capacity_per_s"], seeds)]
        lines.append(seed_row(f"{cap['policy']}: capacity / ceiling", shares, "{:.0%}"))
    return "\n".join(lines)


def sweep_main(argv: Sequence[str] | None, description: str, results_help: str,
               table_of: Callable[[SweepSpec, dict[str, Any] | None], str]) -> int:
    """A bound's command line: ``--sweep`` (cluster, trace and seeds) and an optional ``--results`` of
    the same sweep; prints ``table_of`` them."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--sweep", type=Path, required=True, help="the sweep's YAML: cluster, trace and seeds")
    parser.add_argument("--results", type=Path, help=results_help)
    args = parser.parse_args(argv)
    spec = SweepSpec.from_yaml(args.sweep)
    print(table_of(spec, json.loads(args.results.read_text()) if args.results else None))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return sweep_main(argv, __doc__.split("\n\n")[0], "a results.json of the same sweep: capacities as shares",
                      lambda spec, results: table(spec, sweep_ceilings(spec), results))


if __name__ == "__main__":
    raise SystemExit(main())
