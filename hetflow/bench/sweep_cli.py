"""``hetflow bench``: a sweep of policies x loads x seeds, in the simulator (``--sweep FILE``) or on a
live stack (``--live``); prints a table, writes JSON and PNG plots under ``bench_out/<name>/``."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from hetflow.bench.common import OUT_DIR, machine

COLUMNS = (("policy", "policy", "{}"), ("lat/tok ms", "latency_per_output_token_ms", "{:.2f}"),
           ("mean s", "latency_mean_s", "{:.1f}"), ("p95 s", "latency_p95_s", "{:.1f}"),
           ("score", "task_score", "{:.3f}"), ("expected score", "expected_task_score", "{:.3f}"),
           ("SLO95 x", "slo_scale_for_95pct", "{:.1f}"),
           ("goodput/s", "goodput_programs_per_s", "{:.2f}"), ("queue", "queueing_share", "{:.0%}"),
           ("preempt", "preemptions", "{:.0f}"), ("prefix hits", "prefix_hit_rate", "{:.0%}"),
           ("busiest engine", "busiest_engine_call_share", "{:.0%}"),
           ("router changed", "router_changed_share", "{:.0%}"),
           ("longest-decile p95 s", "longest_decile_p95_s", "{:.1f}"),
           ("stable", "stable", "{}"))


def table(rows: Sequence[Mapping[str, Any]], baseline: str = "least-load") -> str:
    """Markdown, one block per load; ``vs LL`` is least load's latency per token over the policy's."""
    lines = []
    for load in dict.fromkeys(r["load"] for r in rows):
        rs = [r for r in rows if r["load"] == load]
        base = next((r for r in rs if r["policy"] == baseline), None)
        deadlines = any(r.get("deadline_attainment_by_tenant") for r in rs)
        lines += [f"\n**{load}** ({rs[0]['rate_per_s']:.3g} programs/s)\n",
                  "| " + " | ".join(c for c, _, _ in COLUMNS) + " | vs LL |" + (" deadline met |" if deadlines else ""),
                  "|" + "---|" * (len(COLUMNS) + 1 + deadlines)]
        for r in rs:
            cells = ["-" if r.get(k) is None else f.format(r[k]) for _, k, f in COLUMNS]
            if base is None:
                speedup = "-"  # least load did not run at this load
            elif r["stable"] and base["stable"]:
                speedup = f"{base['latency_per_output_token_ms'] / r['latency_per_output_token_ms']:.2f}x"
            else:
                speedup = "unstable"
            met = r.get("deadline_attainment_by_tenant") or {}
            lines.append("| " + " | ".join(cells) + f" | {speedup} |"
                         + (" " + ", ".join(f"{t} {v:.0%}" for t, v in met.items()) + " |" if deadlines else ""))
    return "\n".join(lines)


def show_table(args: argparse.Namespace) -> int:
    """The table of a finished sweep, from its results.json (rows re-aggregated from its runs)."""
    from hetflow.bench.sweep import aggregate

    result = json.loads(Path(args.table).read_text())
    print(f"## {result['command']} ({result['machine']})")
    print(table(aggregate(result["runs"])))
    return 0


def run_sweep(args: argparse.Namespace) -> int:
    from hetflow.bench import plots
    from hetflow.bench.sweep import Sweep, SweepSpec, aggregate
    from hetflow.core.presets import resolve, split_specs

    spec = SweepSpec.from_yaml(Path(args.sweep))
    if args.programs:
        spec = replace(spec, trace={**spec.trace, "programs": args.programs})
    if args.seeds:
        spec = replace(spec, seeds=tuple(int(s) for s in args.seeds.split(",")))
    if args.policies:
        spec = replace(spec, policies=tuple(split_specs(args.policies)))
        for policy in spec.policies:
            try:
                resolve(policy)
            except ValueError as exc:  # before any run starts, not in a worker
                raise SystemExit(f"--policies: {exc}") from None
    if args.rivals is not None:
        chosen = [] if args.rivals == "none" else args.rivals.split(",")
        unknown = sorted(set(chosen) - set(spec.rivals))
        if unknown:
            raise SystemExit(f"--rivals: {', '.join(unknown)} not in {args.sweep} (has {', '.join(spec.rivals)})")
        spec = replace(spec, rivals={r: spec.rivals[r] for r in chosen},
                       fractions_of=spec.fractions_of if chosen else "least-load")
    if args.fractions:
        if "capacity_fractions" not in spec.loads:
            raise SystemExit(f"--fractions needs a capacity sweep; {args.sweep} has loads {dict(spec.loads)}")
        spec = replace(spec, loads={"capacity_fractions": tuple(float(f) for f in args.fractions.split(","))})
    if args.rel_tol is not None:
        if "capacity_fractions" not in spec.loads or not 0 < args.rel_tol < 1:
            raise SystemExit(f"--rel-tol needs a capacity sweep and a value in (0, 1); got {args.rel_tol} for "
                             f"{args.sweep}")
        spec = replace(spec, capacity={**spec.capacity, "rel_tol": args.rel_tol})
    out = Path(args.out) if args.out else OUT_DIR / spec.name
    if args.so_far:
        return show_so_far(spec, out / "capacity-searches.jsonl")
    started = time.perf_counter()
    sweep = Sweep(spec, learned_source(spec), workers=args.workers, decode_runs=not args.reference,
                  stop_settled=args.stop_settled)
    if "capacity_fractions" in spec.loads:
        return _run_capacity(args, sweep, out, started)
    rates = sweep.rates(progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    runs = sweep.run(rates, progress=_progress)
    rows = aggregate(runs)
    out.mkdir(parents=True, exist_ok=True)
    result = {"command": _command(args),
              "machine": machine(), "spec": spec.__dict__, "rates_per_s": rates, "rows": rows, "runs": runs,
              "elapsed_s": time.perf_counter() - started}
    (out / "results.json").write_text(json.dumps(result, indent=1, default=list))
    plots.frontier(rows, out, spec.name)
    plots.slo_attainment(runs, out, spec.name)
    plots.latency_cdf(runs, out, spec.name)
    print(f"## {spec.name}: {spec.trace}, cluster {spec.cluster}, router {spec.router}, predictor {spec.predictor}, "
          f"seeds {list(spec.seeds)}")
    print(table(rows))
    print(f"\n-> {out}/results.json, frontier.png, slo_attainment.png, latency_cdf.png "
          f"({time.perf_counter() - started:.0f} s)")
    return 0


def _run_capacity(args: argparse.Namespace, sweep: Any, out: Path, started: float) -> int:
    """Capacity at SLO per policy and seed, then every policy at fractions of least load's capacity."""
    from hetflow.bench import plots
    from hetflow.bench.capacity import Capacity
    from hetflow.bench.sweep import aggregate, best_of_grids

    spec = sweep.spec
    for seed, dropped in sweep.dropped.items():
        if dropped:
            print(f"seed {seed}: {len(dropped)} program(s) no engine could ever hold, left out: {', '.join(dropped)}",
                  file=sys.stderr, flush=True)
    ceilings = {seed: sweep.ceiling(seed) for seed in spec.seeds}  # before the workers fork: they inherit them
    journal = out / "capacity-searches.jsonl"
    if not args.resume:
        journal.unlink(missing_ok=True)
    capacities: dict[tuple[str, int], Capacity] = sweep.capacities(progress=_progress, journal=journal)
    runs = sweep.run_all(sweep.fraction_runs(capacities), progress=_progress)
    rows = aggregate(runs)
    per_policy = capacity_rows(capacities, spec.capacity_policies, spec.seeds)
    rivals = rival_rows(best_of_grids(capacities, spec.rivals, spec.seeds), spec.rivals, spec.seeds)
    out.mkdir(parents=True, exist_ok=True)
    result = {"command": _command(args), "machine": machine(), "spec": spec.__dict__,
              "slo_rule": spec.slo_rule.__dict__, "capacity": per_policy, "rivals": rivals, "work_ceiling": ceilings,
              "dropped_programs": sweep.dropped,
              "probes": {f"{p}@{seed}": [{"rate_per_s": pr.rate_per_s, "passed": pr.passed,
                                          "failures": list(pr.failures), **pr.summary}
                                         for pr in c.probes] for (p, seed), c in capacities.items()},
              "rows": rows, "runs": runs, "elapsed_s": time.perf_counter() - started}
    (out / "results.json").write_text(json.dumps(result, indent=1, default=list))
    plots.latency_against_load(result["probes"], out, spec.name)
    print(f"## {spec.name}: {spec.trace}, cluster {spec.cluster}, router {spec.router}, predictor {spec.predictor}, "
          f"seeds {list(spec.seeds)}; SLO: {spec.slo_rule.attainment:.0%} within {spec.slo_rule.slo_scale:g}x "
          "exclusive latency, stable, no call lost")
    print(capacity_table(per_policy))
    if rivals:
        print(rival_table(rivals))
        print(against_best_rival_table(per_policy, rivals, spec.searched_policies))
    print("\nwork ceiling per seed (hetflow.bench.ceiling), programs/s: "
          + ", ".join(f"{c['ceiling_per_s']:.3g}" for c in ceilings.values())
          + "; ideal prefix hits " + ", ".join(f"{c['ideal_hit_rate']:.0%}" for c in ceilings.values()))
    print(table(rows))
    print(f"\n-> {out}/results.json, latency_against_load.png ({time.perf_counter() - started:.0f} s)")
    return 0


def show_so_far(spec: Any, journal: Path) -> int:
    """The capacity tables of a capacity sweep still running or cut short, from its journal: the seeds every
    policy and rival setting has finished on; nothing is run."""
    from hetflow.bench.sweep import best_of_grids, read_journal

    found = read_journal(journal, spec)
    seeds = [s for s in spec.seeds if all((p, s) in found for p in spec.capacity_policies)]
    print(f"## {spec.name} so far: {len(found)} of {len(spec.capacity_policies) * len(spec.seeds)} searches in "
          f"{journal}; seeds every setting finished on: {seeds or 'none yet'}")
    if not seeds:
        return 0
    per_policy = capacity_rows(found, spec.capacity_policies, seeds)
    rivals = rival_rows(best_of_grids(found, spec.rivals, seeds), spec.rivals, seeds)
    print(capacity_table(per_policy))
    if rivals:
        print(rival_table(rivals))
        print(against_best_rival_table(per_policy, rivals, spec.searched_policies))
    return 0


def capacity_rows(capacities: Mapping[tuple[str, int], Any], policies: Sequence[str], seeds: Sequence[int],
                  baseline: str = "least-load") -> list[dict[str, Any]]:
    """Per policy: capacity per seed, mean, spread, and its ratio to the baseline's on the same seed."""
    rows = []
    for p in policies:
        rates = [capacities[(p, s)].rate_per_s for s in seeds]
        base = [capacities[(baseline, s)].rate_per_s for s in seeds] if (baseline, seeds[0]) in capacities else []
        ratios = [r / b for r, b in zip(rates, base) if b > 0]
        at_capacity = [summary_at_capacity(capacities[(p, s)]) for s in seeds]
        rows.append({"policy": p, "capacity_per_s": rates,
                     "trace_bound": [capacities[(p, s)].trace_bound for s in seeds],
                     "search_bound": [capacities[(p, s)].search_bound for s in seeds],
                     "mean_per_s": statistics.mean(rates),
                     "min_per_s": min(rates), "max_per_s": max(rates),
                     "vs_baseline": statistics.mean(ratios) if ratios else None,
                     "vs_baseline_min": min(ratios) if ratios else None,
                     "queueing_share_at_capacity": _mean(s.get("queueing_share") for s in at_capacity),
                     "prefix_hit_rate_at_capacity": _mean(s.get("prefix_hit_rate") for s in at_capacity),
                     "p95_s_at_capacity": _mean((s.get("latency_s") or {}).get("p95") for s in at_capacity),
                     "task_score_at_capacity": [s.get("task_score") for s in at_capacity],
                     "longest_decile_p95_s_at_capacity": _mean(s.get("longest_decile_p95_s") for s in at_capacity)})
    return rows


def summary_at_capacity(capacity: Any) -> Mapping[str, Any]:
    """The summary of the passing probe at ``capacity``'s rate ({} when none passed)."""
    return next((pr.summary for pr in reversed(capacity.probes)
                 if pr.passed and pr.rate_per_s == capacity.rate_per_s), {})


def rival_rows(best: Mapping[str, Mapping[int, tuple[str, Any]]], rivals: Mapping[str, Sequence[str]],
               seeds: Sequence[int]) -> list[dict[str, Any]]:
    """Per rival: its grid, and on each seed the setting that won and its capacity and task score there."""
    rows = []
    for rival, by_seed in best.items():
        ran = [s for s in seeds if s in by_seed]
        rows.append({"rival": rival, "grid": list(rivals[rival]), "seeds": ran,
                     "winner": [by_seed[s][0] for s in ran],
                     "capacity_per_s": [by_seed[s][1].rate_per_s for s in ran],
                     "task_score_at_capacity": [summary_at_capacity(by_seed[s][1]).get("task_score") for s in ran]})
    return rows


def rival_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Markdown: each rival at its best, seed by seed, with the grid it was chosen from."""
    lines = ["", "| rival | capacity /s per seed (best of its grid) | winner per seed | task score at capacity "
                 "| grid |", "|---|---|---|---|---|"]
    for r in rows:
        scores = ", ".join(_cell(t, "{:.3f}") for t in r["task_score_at_capacity"])
        lines.append(f"| {r['rival']} | " + ", ".join(f"{c:.3g}" for c in r["capacity_per_s"]) + " | "
                     + ", ".join(r["winner"]) + f" | {scores} | " + "; ".join(r["grid"]) + " |")
    return "\n".join(lines)


TRADE_CAPACITY = "a trade: more capacity at a lower task score"
TRADE_SCORE = "a trade: a higher task score at less capacity"


def against_best_rival(policy_row: Mapping[str, Any], rivals: Sequence[Mapping[str, Any]],
                       score_tolerance: float = 0.005) -> list[dict[str, Any]]:
    """Per seed: the policy's capacity over the best rival's on that seed, the task scores at capacity, and
    the trade, if any: a higher capacity bought with a task score lower by more than ``score_tolerance``,
    or a higher task score (by more than it) bought with a lower capacity."""
    out = []
    for i, rate in enumerate(policy_row["capacity_per_s"]):
        seed_rivals = [(r["rival"], r["capacity_per_s"][i], r["task_score_at_capacity"][i]) for r in rivals
                       if i < len(r["capacity_per_s"])]
        if not seed_rivals:
            continue
        name, best_rate, best_score = max(seed_rivals, key=lambda x: x[1])
        score = (policy_row.get("task_score_at_capacity") or [None] * (i + 1))[i]
        scored = score is not None and best_score is not None
        trade = None
        if scored and score < best_score - score_tolerance and rate > best_rate:
            trade = TRADE_CAPACITY
        elif scored and score > best_score + score_tolerance and rate < best_rate:
            trade = TRADE_SCORE
        out.append({"best_rival": name, "ratio": rate / best_rate if best_rate > 0 else None, "task_score": score,
                    "rival_task_score": best_score, "trade": trade})
    return out


def against_best_rival_table(policy_rows: Sequence[Mapping[str, Any]], rivals: Sequence[Mapping[str, Any]],
                             ours: Sequence[str]) -> str:
    """Markdown: each of ``ours`` against the best rival seed by seed; a capacity gain with a lower task score,
    or a higher task score with less capacity, is written as a trade."""
    lines = ["", "| policy | vs the best rival per seed | task score at capacity, ours / rival's | trade |",
             "|---|---|---|---|"]
    for row in (r for r in policy_rows if r["policy"] in ours):
        seeds = against_best_rival(row, rivals)
        lines.append(f"| {row['policy']} | "
                     + ", ".join(f"{_cell(s['ratio'], '{:.2f}x')} ({s['best_rival']})" for s in seeds) + " | "
                     + ", ".join(f"{_cell(s['task_score'], '{:.3f}')} / {_cell(s['rival_task_score'], '{:.3f}')}"
                                 for s in seeds) + " | "
                     + ("; ".join(sorted({s["trade"] for s in seeds if s["trade"]})) or "no") + " |")
    return "\n".join(lines)


def capacity_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Markdown; a per-seed capacity marked ``>=`` is a lower bound set by the trace's length
    (``Capacity.trace_bound``) or by the search's highest rate (``Capacity.search_bound``), and a note
    below says which."""
    head = ("| policy | capacity /s, mean | min-max | per seed | vs least-load (min) | queueing at capacity "
            "| prefix hits | p95 s | longest-decile p95 s | task score at capacity |")
    lines = ["", head, "|" + "---|" * 10]
    for r in rows:
        vs = f"{r['vs_baseline']:.2f}x ({r['vs_baseline_min']:.2f}x)" if r["vs_baseline"] else "-"
        absent = [False] * len(r["capacity_per_s"])                          # absent from older results
        bounds = [a or b for a, b in zip(r.get("trace_bound") or absent, r.get("search_bound") or absent)]
        per_seed = [f"{'>=' if bound else ''}{x:.3g}" for x, bound in zip(r["capacity_per_s"], bounds)]
        lines.append(f"| {r['policy']} | {r['mean_per_s']:.3g} | {r['min_per_s']:.3g}-{r['max_per_s']:.3g} | "
                     + ", ".join(per_seed) + f" | {vs} | "
                     + " | ".join(_cell(r[k], f) for k, f in (("queueing_share_at_capacity", "{:.0%}"),
                                                              ("prefix_hit_rate_at_capacity", "{:.0%}"),
                                                              ("p95_s_at_capacity", "{:.1f}"),
                                                              ("longest_decile_p95_s_at_capacity", "{:.1f}")))
                     + " | " + ", ".join(_cell(t, "{:.3f}") for t in r.get("task_score_at_capacity") or [None])
                     + " |")
    if any(any(r.get("trace_bound") or ()) for r in rows):
        lines.append("\n>= : the next rate up failed only for not being sustained (its trace arrived within "
                     "fewer median latencies than the rule needs): a lower bound set by the trace's length; "
                     "run more programs to measure it.")
    if any(any(r.get("search_bound") or ()) for r in rows):
        lines.append("\n>= at the search's highest rate (hetflow.bench.sweep.capacity_search_top_per_s): it passed, "
                     "so the capacity is at least that.")
    return "\n".join(lines)


def _mean(values: Any) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.mean(present) if present else None


def _cell(value: Any, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def _command(args: argparse.Namespace) -> str:
    overrides = (("programs", args.programs), ("seeds", args.seeds), ("policies", args.policies),
                 ("rivals", args.rivals), ("fractions", args.fractions), ("rel-tol", args.rel_tol))
    flags = [f"--sweep {args.sweep}"] + [f"--{k} {v}" for k, v in overrides if v]
    switches = [f"--{k}" for k, on in (("reference", args.reference), ("stop-settled", args.stop_settled),
                                       ("resume", args.resume)) if on]
    return "hetflow bench " + " ".join(flags + switches)


def _progress(done: int, total: int) -> None:
    width = 30
    filled = width * done // total
    print(f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} runs", end="\n" if done == total else "",
          file=sys.stderr, flush=True)


def learned_source(spec: Any) -> Any:
    if "learned" not in (spec.router, spec.predictor):
        return None
    from hetflow.bench.learned_signals import learned_signals
    from hetflow.learned import ensure_trained

    def compute(records: list, models: list[str]) -> Any:
        router_dir, predictor_dir = ensure_trained(models)
        return learned_signals(records, models, router_dir if spec.router == "learned" else None,
                               predictor_dir if spec.predictor == "learned" else None)

    return compute


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="benchmark sweep: policies x loads x seeds, in the simulator or on a live stack")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--sweep", help="sweep YAML (bench/sweeps/*.yaml): simulator mode")
    mode.add_argument("--live", action="store_true", help="replay a trace against a running stack")
    mode.add_argument("--table", help="print the table of a finished sweep from its results.json")
    p.add_argument("--programs", type=int, help="override the sweep's programs per trace")
    p.add_argument("--seeds", help="override the sweep's seeds, comma-separated")
    p.add_argument("--policies", help="override the sweep's policies, comma-separated")
    p.add_argument("--rivals", help="capacity sweeps: only these rivals' grids, comma-separated ('none': no rival; "
                                     "the fractions are then of least load's capacity)")
    p.add_argument("--fractions", help="capacity sweeps: override the fractions of least load's capacity, "
                                        "comma-separated")
    p.add_argument("--rel-tol", type=float, help="capacity sweeps: override the capacity search's relative "
                                                  "tolerance (a \"never below\" is decided at 0.01)")
    p.add_argument("--workers", type=int, default=2, help="simulation processes")
    p.add_argument("--so-far", action="store_true",
                   help="capacity sweeps: print the capacity tables of the seeds every setting has finished on, from "
                        "the output folder's capacity-searches.jsonl, and run nothing")
    p.add_argument("--resume", action="store_true",
                   help="capacity sweeps: take the searches already in the output folder's capacity-searches.jsonl "
                        "(each appended as it ends) for the same rule, and run only the rest")
    p.add_argument("--reference", action="store_true",
                   help="step every engine iteration, the simulator's reference mode; by default pure decode "
                        "runs are one event (docs/simulator-speed.md)")
    p.add_argument("--stop-settled", action="store_true",
                   help="capacity sweeps: stop a probe once more workflows than the SLO rule allows have certainly "
                        "missed it (the same verdicts and capacities; a stopped probe's figures cover only what ran, "
                        "and it says where it stopped)")
    p.add_argument("-o", "--out", help="output folder (default bench_out/<sweep name>)")
    from hetflow.bench import live

    live.add_arguments(p)
    p.set_defaults(fn=lambda a: live.run(a) if a.live else show_table(a) if a.table else run_sweep(a))
