"""Task score against latency per output token (Chimera's figure 5) from finished capacity sweeps:
``python -m hetflow.bench.frontier bench_out/<sweep>/results.json ... -o frontier.png``.

One panel per results file, at its common load (the first of its ``capacity_fractions``, of the best
rival's capacity where the sweep has rivals): every policy's seed-mean point, hetflow at each latency
slack joined into one line, each rival at the setting that won its grid on each seed. The points are the
results files' own rows, so the figure needs no run.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Mapping, Sequence


def panel(result: Mapping[str, Any], load: str | None = None) -> tuple[str, list[dict[str, Any]]]:
    """(title, rows) of one results file at ``load`` (its first load when None), rows re-aggregated from its runs."""
    from hetflow.bench.sweep import aggregate

    rows = aggregate(result["runs"])
    if not rows:
        raise SystemExit(f"{result.get('command', 'a results file')}: no runs at a fixed load to plot")
    load = load or rows[0]["load"]
    chosen = [r for r in rows if r["load"] == load]
    if not chosen:
        raise SystemExit(f"no runs at load {load!r}; loads: {sorted({r['load'] for r in rows})}")
    spec = result.get("spec", {})
    return f"{spec.get('name', '?')}\n{load}", chosen   # two lines: a sweep's name and its load overflow one


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hetflow.bench.frontier", description=__doc__.split("\n\n")[0])
    p.add_argument("results", nargs="+", help="results.json of capacity (or rate) sweeps")
    p.add_argument("--load", help="the load label to plot (default: each file's first)")
    p.add_argument("-o", "--out", default="frontier.png", help="the PNG to write")
    args = p.parse_args(argv)
    from hetflow.bench.plots import score_against_latency

    panels = [panel(json.loads(Path(path).read_text()), args.load) for path in args.results]
    print(score_against_latency(panels, Path(args.out)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
