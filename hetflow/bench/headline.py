"""The headline: hetflow's default against the best rival at its best, per family and cluster, capacity at
SLO per seed, P95 at the common load and the task score beside it, drawn from the sweeps' results files.

    python -m hetflow.bench.headline bench/headline.yaml -o docs/figures/headline.png

``bench/headline.yaml`` names each row's results file (``hetflow bench --sweep``'s, its rivals at their
best: each rival's grid's best per seed), the policy in it that is today's default, and the section of
docs/results.md that gives the run. The best rival of a seed is the rival whose grid reached the highest
capacity on it; P95 and the task scores are at the sweep's common load (80% of the best rival's
capacity): P95 per seed as that seed's best rival's over the default's (above 1: the default's is lower),
the task scores the default's beside the rival best on most seeds. Prints the table (markdown) and draws
the figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import yaml

COMMON_LOAD = "80% of the best rival's capacity"


@dataclass(frozen=True)
class HeadlineRow:
    label: str
    default_per_s: tuple[float, ...]
    best_rival: tuple[str, ...]
    """Per seed, the rival whose grid reached the highest capacity."""
    best_rival_per_s: tuple[float, ...]
    p95_ratios: tuple[float, ...]
    """Per seed, at the common load: the best rival's P95 latency over the default's (seeds run at it only)."""
    default_task_score: float | None
    best_rival_task_score: float | None
    """At the common load, the task score of the rival best on most seeds."""
    section: str

    @property
    def ratios(self) -> tuple[float, ...]:
        return tuple(d / r if r else float("inf") for d, r in zip(self.default_per_s, self.best_rival_per_s))


def headline_row(label: str, result: Mapping[str, Any], default: str, section: str) -> HeadlineRow:
    """One row from a sweep's results: the default's capacity per seed against the best rival's."""
    capacity = {c["policy"]: c for c in result["capacity"]}
    if default not in capacity:
        raise ValueError(f"{label}: no policy {default!r} in the results; known: {sorted(capacity)}")
    rivals = result["rivals"]
    if not rivals:
        raise ValueError(f"{label}: the results hold no rival at its best")
    best = best_rival_per_seed(rivals)[:len(capacity[default]["capacity_per_s"])]
    at_load = {r["policy"]: r.get("task_score") for r in result["rows"] if r["load"] == COMMON_LOAD}
    names = [name for name, _ in best]
    leader = max(names, key=lambda n: (names.count(n), -names.index(n)))
    return HeadlineRow(label, tuple(capacity[default]["capacity_per_s"]), tuple(names),
                       tuple(per_s for _, per_s in best),
                       p95_ratios(result.get("runs", ()), default, names), at_load.get(default),
                       at_load.get(leader), section)


def best_rival_per_seed(rivals: Sequence[Mapping[str, Any]]) -> list[tuple[str, float]]:
    """(rival, capacity) per seed: the rival whose grid reached the highest capacity on it (the first
    listed on a tie)."""
    seeds = len(rivals[0]["capacity_per_s"])
    return [max(((r["rival"], r["capacity_per_s"][i]) for r in rivals), key=lambda rc: rc[1]) for i in range(seeds)]


def p95_ratios(runs: Sequence[Mapping[str, Any]], default: str, best_rival: Sequence[str]) -> tuple[float, ...]:
    """Per seed (1, 2, ...), the P95 of that seed's best rival over the default's at the common load; a seed
    where either did not run there is left out."""
    p95 = {(r["policy"], r["seed"]): r["latency_s"]["p95"] for r in runs if r["load"] == COMMON_LOAD}
    pairs = [(p95.get((rival, seed)), p95.get((default, seed))) for seed, rival in enumerate(best_rival, 1)]
    return tuple(theirs / ours for theirs, ours in pairs if theirs is not None and ours)


def load_rows(spec_path: Path) -> list[HeadlineRow]:
    spec = yaml.safe_load(spec_path.read_text())
    return [headline_row(row["label"], json.loads((spec_path.parent.parent / row["results"]).read_text()),
                         row["default"], row["section"]) for row in spec["rows"]]


def _score(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def table(rows: Sequence[HeadlineRow]) -> str:
    """The front page's table: each row links to its section."""
    lines = ["| family, cluster | hetflow, programs/s per seed | best rival at its best | ratio per seed | "
             "P95 at 80%: the rival's over hetflow's | task score: hetflow, the rival |",
             "| --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        rivals = ", ".join(f"{v:.3g} ({name})" for v, name in zip(row.best_rival_per_s, row.best_rival))
        lines.append(f"| [{row.label}]({row.section}) | {', '.join(f'{v:.3g}' for v in row.default_per_s)} | "
                     f"{rivals} | "
                     f"{', '.join(f'{r:.2f}x' for r in row.ratios)} | "
                     f"{', '.join(f'{r:.2f}x' for r in row.p95_ratios) or '-'} | "
                     f"{_score(row.default_task_score)}, {_score(row.best_rival_task_score)} |")
    return "\n".join(lines)


def _ratio_panel(ax: Any, rows: Sequence[HeadlineRow], ys: Sequence[int], per_row: str, label: str) -> None:
    """A dot per seed and a bar at the mean of each row's ``per_row`` ratios, a line at 1."""
    for y, row in zip(ys, rows):
        values = getattr(row, per_row)
        if values:
            ax.scatter(values, [y] * len(values), color="tab:blue", s=22, zorder=3)
            ax.plot([statistics.fmean(values)] * 2, [y - 0.25, y + 0.25], color="tab:blue", lw=1.5)
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_xlabel(label, fontsize=8)


def draw(rows: Sequence[HeadlineRow], out: Path) -> Path:
    """Left: capacity over the best rival's, a dot per seed; middle: the best rival's P95 over the
    default's at the common load; right: the task scores at the common load."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(12, 0.55 * len(rows) + 1.6), sharey=True,
                                              gridspec_kw={"width_ratios": [3, 3, 2]})
    ys = list(range(len(rows)))[::-1]
    _ratio_panel(left, rows, ys, "ratios",
                 "capacity at SLO over the best rival's at its best\n(a dot per seed, a bar at the mean)")
    _ratio_panel(middle, rows, ys, "p95_ratios",
                 "the best rival's P95 over hetflow's at 80% of\nits capacity (above 1: hetflow's is lower)")
    for y, row in zip(ys, rows):
        for value, color, mark in ((row.default_task_score, "tab:blue", "o"),
                                   (row.best_rival_task_score, "tab:gray", "s")):
            if value is not None:
                right.scatter([value], [y], color=color, marker=mark, s=26, zorder=3)
    left.set_yticks(ys, [row.label for row in rows], fontsize=8)
    right.set_xlabel("task score at 80% of\nthe best rival's capacity", fontsize=8)
    right.scatter([], [], color="tab:blue", marker="o", label="hetflow's default")
    right.scatter([], [], color="tab:gray", marker="s", label="the best rival (best on most seeds)")
    right.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=1, frameon=False)
    for ax in (left, middle, right):
        ax.grid(axis="x", lw=0.3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hetflow.bench.headline", description=__doc__.split("\n\n")[0])
    p.add_argument("spec", type=Path, help="bench/headline.yaml: a row per family and cluster")
    p.add_argument("-o", "--out", type=Path, default=Path("docs/figures/headline.png"))
    args = p.parse_args(argv)
    rows = load_rows(args.spec)
    print(table(rows))
    print(f"-> {draw(rows, args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
