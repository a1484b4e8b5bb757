"""The sweep's figures, as PNG: the latency-performance frontier (Chimera figure 5), SLO attainment
against SLO scale (HexGen-Flow figure 6's axes) and workflow latency CDFs, one panel per load."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402


def _by_load(rows: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    out: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        out.setdefault(r["load"], []).append(r)
    return out


def _panels(n: int, title: str) -> tuple[Any, list[Any]]:
    fig, axes = plt.subplots(1, n, figsize=(5 * n, 4), squeeze=False)
    fig.suptitle(title)
    return fig, list(axes[0])


def frontier(rows: Sequence[Mapping[str, Any]], out: Path, title: str) -> Path:
    """Task score against latency per output token, one point per policy; Chimera's latency slacks joined."""
    loads = _by_load(rows)
    fig, axes = _panels(len(loads), f"{title}: latency-performance frontier")
    for ax, (load, rs) in zip(axes, loads.items()):
        scored = [r for r in rs if r["task_score"] is not None]
        for r in scored:
            ax.scatter(r["latency_per_output_token_ms"], r["task_score"], label=r["policy"])
        chimera = sorted((r for r in scored if r["policy"].startswith("chimera") and "no-router" not in r["policy"]),
                         key=lambda r: r["latency_per_output_token_ms"])
        if len(chimera) > 1:
            ax.plot([r["latency_per_output_token_ms"] for r in chimera], [r["task_score"] for r in chimera],
                    "k--", lw=0.8)
        ax.set(title=load, xlabel="E2E latency per output token (ms)", ylabel="task score")
        ax.legend(fontsize=7)
    return _save(fig, out / "frontier.png")


def slo_attainment(runs: Sequence[Mapping[str, Any]], out: Path, title: str) -> Path:
    loads = _by_load(runs)
    fig, axes = _panels(len(loads), f"{title}: SLO attainment")
    for ax, (load, rs) in zip(axes, loads.items()):
        for policy in dict.fromkeys(r["policy"] for r in rs):
            seeds = [r for r in rs if r["policy"] == policy]
            scales = list(seeds[0]["slo"]["attainment"])
            mean = [sum(r["slo"]["attainment"][s] for r in seeds) / len(seeds) for s in scales]
            ax.plot([float(s) for s in scales], mean, marker=".", label=policy)
        ax.axhline(0.95, color="grey", lw=0.6, ls=":")
        ax.set(title=load, xlabel="SLO scale (x isolated latency)", ylabel="attainment", xscale="log")
        ax.legend(fontsize=7)
    return _save(fig, out / "slo_attainment.png")


def latency_cdf(runs: Sequence[Mapping[str, Any]], out: Path, title: str) -> Path:
    loads = _by_load(runs)
    fig, axes = _panels(len(loads), f"{title}: workflow latency CDF (first seed)")
    for ax, (load, rs) in zip(axes, loads.items()):
        seen: set[str] = set()
        for r in rs:
            if r["policy"] in seen:
                continue
            seen.add(r["policy"])
            lat = r["latencies_s"]
            ax.plot(lat, [(i + 1) / len(lat) for i in range(len(lat))], label=r["policy"])
        ax.set(title=load, xlabel="workflow latency (s)", ylabel="CDF", xscale="log")
        ax.legend(fontsize=7)
    return _save(fig, out / "latency_cdf.png")


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def latency_against_load(probes: Mapping[str, Sequence[Mapping[str, Any]]], out: Path, title: str) -> Path:
    """P95 workflow latency against arrival rate, one line per policy (every capacity probe of every
    seed; hollow markers: the probe failed the SLO rule; a probe stopped once its failure was settled has
    no whole-run P95 and is left out)."""
    fig, axes = _panels(1, f"{title}: latency against load")
    ax = axes[0]
    policies: dict[str, list[Mapping[str, Any]]] = {}
    for key, runs in probes.items():
        policies.setdefault(key.rsplit("@", 1)[0], []).extend(runs)
    for policy, runs in policies.items():
        ordered = sorted((r for r in runs if r.get("latency_s") and not r.get("settled")),  # stopped: partial
                         key=lambda r: r["rate_per_s"])
        line, = ax.plot([r["rate_per_s"] for r in ordered], [r["latency_s"]["p95"] for r in ordered], lw=0.8,
                        label=policy)
        for r in ordered:
            ax.scatter(r["rate_per_s"], r["latency_s"]["p95"], s=14, color=line.get_color(),
                       facecolors=line.get_color() if r["passed"] else "none")
    ax.set_xlabel("arrival rate (programs/s)")
    ax.set_ylabel("P95 workflow latency (s)")
    ax.set_yscale("log")
    ax.legend(fontsize=7)
    path = out / "latency_against_load.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def slack_of(policy: str) -> tuple[str, float | None]:
    """A policy spec's name without its ``latency_slack`` override, and that slack (None when not set)."""
    name, _, overrides = policy.partition(":")
    slack, rest = None, []
    for item in filter(None, overrides.split(",")):
        key, _, value = item.partition("=")
        if key == "latency_slack":
            slack = float(value)
        else:
            rest.append(item)
    return name + (":" + ",".join(rest) if rest else ""), slack


SPREAD_FOR_LOG_AXIS = 10.0
"""Past this ratio of the slowest point's latency to the fastest's, the latency axis is logarithmic."""


def score_against_latency(panels: Sequence[tuple[str, Sequence[Mapping[str, Any]]]], out: Path) -> Path:
    """Chimera's figure 5 for several sweeps: task score against latency per output token, one panel per
    (title, rows at one load), one point per policy; a policy run at several latency slacks is one line,
    each point labelled with its slack (its default's slack unlabelled)."""
    fig, axes = _panels(len(panels), "task score against latency per output token")
    for ax, (title, rows) in zip(axes, panels):
        lines: dict[str, list[tuple[float, float, float | None]]] = {}
        for r in (r for r in rows if r.get("task_score") is not None):
            base, slack = slack_of(r["policy"])
            lines.setdefault(base, []).append((r["latency_per_output_token_ms"], r["task_score"], slack))
        for base, points in lines.items():
            points.sort(key=lambda p: (p[0], p[1], p[2] is not None, p[2] or 0.0))  # the default's slack (None) first
            drawn, = ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", ms=4,
                             lw=0.8 if len(points) > 1 else 0, label=base)
            for x, y, slack in points:
                if slack is not None:
                    ax.annotate(f"τ={slack:g}", (x, y), fontsize=6, color=drawn.get_color(),
                                xytext=(3, 3), textcoords="offset points")
        ax.set(title=title, xlabel="E2E latency per output token (ms)", ylabel="task score")
        latencies = [p[0] for points in lines.values() for p in points]
        if latencies and max(latencies) > SPREAD_FOR_LOG_AXIS * min(latencies):
            ax.set_xscale("log")   # a point an order of magnitude out (an overloaded model pool) hides the rest
            ax.xaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
            ax.xaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
            ax.xaxis.set_minor_formatter(ticker.NullFormatter())
        ax.legend(fontsize=6)
    return _save(fig, out)


def reliability_diagram(diagrams: Mapping[tuple[str, str], Sequence[tuple[float, float, int]]], out: Path,
                        title: str) -> Path:
    """Share solved against mean confidence per bin, one panel per model, one line per router (each
    (router, model)'s bins as ``hetflow.bench.router_budget.reliability`` gives them); the diagonal is a
    calibrated router."""
    models = sorted({m for _, m in diagrams})
    fig, axes = _panels(len(models), f"{title}: reliability of each router's confidences")
    for ax, model in zip(axes, models):
        ax.plot([0, 1], [0, 1], color="grey", lw=0.6, ls="--")
        for (router, m), points in diagrams.items():
            if m == model:
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", ms=3, lw=0.8, label=router)
        ax.set(title=model, xlabel="confidence (bin mean)", ylabel="share solved", xlim=(0, 1), ylim=(0, 1))
        ax.legend(fontsize=6)
    return _save(fig, out)
