"""Per-seed tables of a finished capacity sweep with rivals, the figures docs/results.md quotes:

    python -m hetflow.bench.seed_tables bench/results/<sweep>.json

1. every setting's capacity at SLO per seed, with its task score, queueing share and prefix hit rate at
   capacity;
2. each rival's winning setting per seed, the best rival per seed, and each of hetflow's settings over the
   best rival and over each rival, with its share of the seed's work ceiling;
3. at the common load (the sweep's first ``capacity_fractions``, or ``--load``), each policy's figures per
   seed: rate, task score, expected task score, P95, the longest decile's P95, queueing, prefix hits,
   stability and the share of workflows within the SLO.

Markdown, from the results file alone (no run).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from hetflow.bench.headline import best_rival_per_seed


def _per_seed(values: Sequence[float | None], digits: int = 3) -> str:
    return ", ".join("-" if v is None else f"{v:.{digits}f}" for v in values)


def capacity_table(result: Mapping[str, Any]) -> str:
    lines = ["| setting | capacity /s per seed | task score at capacity | queueing, prefix hits at capacity |",
             "| --- | --- | --- | --- |"]
    for c in result["capacity"]:
        lines.append(f"| {c['policy']} | {_per_seed(c['capacity_per_s'])} | "
                     f"{_per_seed(c.get('task_score_at_capacity') or [])} | "
                     f"{100 * c['queueing_share_at_capacity']:.1f}%, {100 * c['prefix_hit_rate_at_capacity']:.1f}% |")
    return "\n".join(lines)


def ratio_table(result: Mapping[str, Any]) -> str:
    """Each rival's winners, the best rival per seed, and hetflow's settings over them."""
    best = best_rival_per_seed(result["rivals"])
    lines = ["| rival | winner per seed | capacity /s per seed | task score at capacity |", "| --- | --- | --- | --- |"]
    lines += [f"| {r['rival']} | {', '.join(r['winner'])} | {_per_seed(r['capacity_per_s'])} | "
              f"{_per_seed(r['task_score_at_capacity'])} |" for r in result["rivals"]]
    lines += [f"| **best per seed** | {', '.join(name for name, _ in best)} | {_per_seed([v for _, v in best])} | |",
              "", "| hetflow's setting | over the best rival | share of the work ceiling | "
              + " | ".join(f"over {r['rival']}" for r in result["rivals"]) + " |",
              "| --- | --- | --- | " + " | ".join("---" for _ in result["rivals"]) + " |"]
    ceilings = result.get("work_ceiling", {})
    for c in (c for c in result["capacity"] if c["policy"].startswith("hetflow")):
        ours = c["capacity_per_s"]
        share = [v / ceilings[str(i)]["ceiling_per_s"] if str(i) in ceilings else None for i, v in enumerate(ours, 1)]
        over = [_per_seed([a / b for a, b in zip(ours, r["capacity_per_s"])]) for r in result["rivals"]]
        lines.append(f"| {c['policy']} | {_per_seed([a / b for a, (_, b) in zip(ours, best)])} | "
                     f"{_per_seed(share)} | " + " | ".join(over) + " |")
    return "\n".join(lines)


COLUMNS: tuple[tuple[str, Callable[[Mapping[str, Any]], Any], int], ...] = (
    ("rate /s", lambda r: r["rate_per_s"], 2),
    ("task score", lambda r: r["task_score"], 3),
    ("expected score", lambda r: r.get("expected_task_score"), 3),
    ("P95 s", lambda r: r["latency_s"]["p95"], 1),
    ("longest decile's P95 s", lambda r: r["longest_decile_p95_s"], 1),
    ("queueing %", lambda r: 100 * r["queueing_share"], 1),
    ("prefix hits %", lambda r: 100 * r["prefix_hit_rate"], 1),
    ("within SLO %", lambda r: 100 * r["within_slo_share"], 1),
)


def common_load_table(result: Mapping[str, Any], load: str | None = None) -> str:
    """Each policy (a rival under its name, at its winning setting on each seed) per seed at ``load``."""
    load = load or (result["runs"][0]["load"] if result["runs"] else "")
    runs = [r for r in result["runs"] if r["load"] == load]
    by_policy: dict[str, list[Mapping[str, Any]]] = {}
    for run in sorted(runs, key=lambda r: r["seed"]):
        by_policy.setdefault(run["policy"], []).append(run)
    lines = [f"At {load}:", "", "| policy | seeds | " + " | ".join(name for name, _, _ in COLUMNS) + " | stable |",
             "| --- | --- | " + " | ".join("---" for _ in COLUMNS) + " | --- |"]
    for policy, rs in by_policy.items():
        cells = [_per_seed([get(r) for r in rs], digits) for _, get, digits in COLUMNS]
        stable = "".join("y" if r["stability"].get("stable", True) else "n" for r in rs)
        settings = sorted({r["setting"] for r in rs})
        name = policy if settings == [policy] else f"{policy} ({', '.join(settings)})"
        lines.append(f"| {name} | {', '.join(str(r['seed']) for r in rs)} | " + " | ".join(cells) + f" | {stable} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hetflow.bench.seed_tables", description=__doc__.split("\n\n")[0])
    p.add_argument("results", type=Path, help="results.json of a capacity sweep with rivals")
    p.add_argument("--load", help="the load label of the per-seed runs (default: the file's first)")
    args = p.parse_args(argv)
    result = json.loads(args.results.read_text())
    if not result.get("rivals") or not result.get("capacity"):
        raise SystemExit(f"{args.results}: no capacities with rivals (a capacity sweep's results.json is needed)")
    ceilings = {seed: round(c["ceiling_per_s"], 3) for seed, c in result.get("work_ceiling", {}).items()}
    print(f"work ceilings per seed: {ceilings}; dropped programs: "
          f"{ {seed: len(d) for seed, d in result.get('dropped_programs', {}).items()} }\n")
    print(capacity_table(result), ratio_table(result), common_load_table(result, args.load), sep="\n\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
