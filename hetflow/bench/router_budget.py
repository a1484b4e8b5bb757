"""How well a router tells which programs the larger model would help, without a simulation (issue 62).

On a pool of two models, Chimera's slack rule (3.6) sends a program's first call to the larger model when
that model is within the latency slack and its confidence exceeds the smaller's by the margin: the router
matters through its predicted gain, confidence(larger) - confidence(smaller). Here each router ranks a
trace's programs by that gain, the top share goes to the larger model and the rest to the smaller, and the
split is scored by the item-response model's own probabilities (``StageRecord.solve_probability``: the
expected task score, free of sampling noise). A router's scores over the share are its budget frontier:
a router that ranks no better than chance lies on the random split's, the probability oracle on the top.
What it leaves out, a simulation measures: latency, load, and which calls the slack lets through.

A program's share of the larger model is not its share of that model's work: the token budget ranks
programs by predicted gain per token the predictor expects them to bring the larger model (the order
``margin_per_ktoken`` gives Chimera's rule) and sends them, best first, while their true tokens fit a
share of all programs' tokens on it; ``shortest`` ranks by predicted tokens alone (no router).

Routers: ``random`` (the baseline at the same share), ``learned`` (the router artifact's sigmoids),
``learned-one-difficulty`` (the same read through one difficulty per prompt,
``hetflow.core.confidence.one_difficulty``, with the router's training label rates as the abilities),
``visible-probability`` (the best a router reading the prompt could know) and ``probability``.

    python -m hetflow.bench.router_budget --sweep bench/sweeps/frontier-code.yaml [--seeds 1] \
        [--reliability reliability.png]
"""

from __future__ import annotations

import argparse
import random
import statistics
from pathlib import Path
from typing import Mapping, Sequence

from hetflow.core.trace import StageRecord, programs
from simulator.signals import LearnedSignals, Signals

SHARES = (0.1, 0.2, 0.3, 0.5)
"""Shares of programs sent to the larger model."""
TOKEN_SHARES = (0.1, 0.2, 0.3)
"""Shares of the larger model's tokens (all programs' on it) spent on the programs sent to it."""
RELIABILITY_BINS = 10
"""Equal-width bins of confidence in a reliability diagram."""


def budget_score(firsts: Sequence[StageRecord], gains: Sequence[float], share: float, small: str,
                 large: str) -> float:
    """The expected task score when the ``share`` of programs with the largest ``gains`` go to ``large``."""
    order = sorted(range(len(firsts)), key=lambda i: -gains[i])
    chosen = set(order[: round(share * len(firsts))])
    return statistics.mean(r.solve_probability[large if i in chosen else small] for i, r in enumerate(firsts))


def confidences_by_router(firsts: Sequence[StageRecord], learned: LearnedSignals | None, models: Sequence[str]
                          ) -> dict[str, list[Mapping[str, float]]]:
    """The confidences each router gives the first calls, as the simulator reads them (``Signals``): the
    learned router raw and read through one difficulty, and the two probability oracles."""
    sources = [*(("learned", "learned-one-difficulty") if learned is not None else ()),
               "visible-probability", "probability"]
    return {source: [Signals(source, learned=learned or LearnedSignals()).confidence_for(r, list(models))
                     for r in firsts] for source in sources}


def router_gains(firsts: Sequence[StageRecord], small: str, large: str,
                 learned: LearnedSignals | None, seed: int) -> dict[str, list[float]]:
    """Each router's predicted gain of ``large`` over ``small`` on each program's first call."""
    rng = random.Random(seed)
    out = {"random": [rng.random() for _ in firsts]}
    for name, confidences in confidences_by_router(firsts, learned, (small, large)).items():
        out[name] = [c[large] - c[small] for c in confidences]
    return out


def frontier(firsts: Sequence[StageRecord], small: str, large: str, learned: LearnedSignals | None,
             seed: int) -> dict[str, list[float]]:
    """Each router's expected task score at each of ``SHARES``."""
    return {name: [budget_score(firsts, gains, share, small, large) for share in SHARES]
            for name, gains in router_gains(firsts, small, large, learned, seed).items()}


def token_budget_score(firsts: Sequence[StageRecord], order_key: Sequence[float], tokens: Sequence[float],
                       share: float, small: str, large: str) -> float:
    """The expected task score when programs go to ``large`` in ascending ``order_key`` while their
    ``tokens`` on it fit ``share`` of all programs' (one that does not fit is passed over)."""
    budget, used, chosen = share * sum(tokens), 0.0, set()
    for i in sorted(range(len(firsts)), key=lambda i: order_key[i]):
        if used + tokens[i] <= budget:
            chosen.add(i)
            used += tokens[i]
    return statistics.mean(r.solve_probability[large if i in chosen else small] for i, r in enumerate(firsts))


def token_frontier(firsts: Sequence[StageRecord], gains: Mapping[str, Sequence[float]],
                   predicted_tokens: Sequence[float], tokens: Sequence[float], small: str, large: str
                   ) -> dict[str, list[float]]:
    """Each router's expected task score at each of ``TOKEN_SHARES``, ranked by gain per predicted token,
    beside ``shortest`` (predicted tokens alone) and ``random`` (its gains alone: a random order)."""
    keys = {name: [-g if name == "random" else -g / max(1.0, y) for g, y in zip(gain, predicted_tokens)]
            for name, gain in gains.items()}
    keys["shortest"] = list(predicted_tokens)
    return {name: [token_budget_score(firsts, key, tokens, share, small, large) for share in TOKEN_SHARES]
            for name, key in keys.items()}


def recovered(scores: Mapping[str, Sequence[float]], name: str) -> float:
    """The share of the visible-probability oracle's gain over the random split that ``name`` recovers,
    summed over the shares."""
    over_random = sum(s - r for s, r in zip(scores[name], scores["random"]))
    ceiling = sum(s - r for s, r in zip(scores["visible-probability"], scores["random"]))
    return over_random / ceiling if ceiling > 0 else float("nan")



def reliability(firsts: Sequence[StageRecord], confidences: Sequence[Mapping[str, float]], model: str
                ) -> tuple[list[tuple[float, float, int]], float]:
    """A reliability diagram of one model's confidences against its answers on the programs' first calls:
    per equal-width bin of confidence, (mean confidence, share solved, programs), and the expected
    calibration error (the bins' gaps weighted by their programs)."""
    bins: list[list[tuple[float, bool]]] = [[] for _ in range(RELIABILITY_BINS)]
    for record, confidence in zip(firsts, confidences):
        q = confidence[model]
        bins[min(int(q * RELIABILITY_BINS), RELIABILITY_BINS - 1)].append((q, record.correct[model]))
    points = [(statistics.mean(q for q, _ in b), statistics.mean(float(c) for _, c in b), len(b)) for b in bins if b]
    error = sum(n * abs(q - solved) for q, solved, n in points) / len(firsts)
    return points, error


GAP_QUANTILES = (0.0, 0.1, 0.3, 0.5, 0.7, 0.8, 0.9, 1.0)


def gap_quantiles(gains: Sequence[float]) -> list[float]:
    """The predicted gain at each of ``GAP_QUANTILES`` over the programs: where a margin in the router's own
    units would cut (Chimera 3.6's delta_s)."""
    ordered = sorted(gains)
    return [ordered[round(q * (len(ordered) - 1))] for q in GAP_QUANTILES]


def table(by_seed: Mapping[int, Mapping[str, Sequence[float]]], shares: Sequence[float] = SHARES,
          what: str = "to the larger") -> str:
    lines = ["| router | seed | " + " | ".join(f"score, {s:.0%} {what}" for s in shares)
             + " | of the visible oracle's gain over random |",
             "|---|---|" + "---|" * (len(shares) + 1)]
    for seed, scores in by_seed.items():
        for name, row in scores.items():
            share = "-" if name == "random" else f"{recovered(scores, name):.0%}"
            lines.append(f"| {name} | {seed} | " + " | ".join(f"{s:.3f}" for s in row) + f" | {share} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweep", type=Path, required=True, help="a sweep on a two-model pool: cluster, trace, seeds")
    parser.add_argument("--seeds", help="comma-separated (default: the sweep's)")
    parser.add_argument("--no-learned", action="store_true", help="leave the learned router out (no artifact run)")
    parser.add_argument("--reliability", type=Path, help="also draw each router's reliability diagram there (PNG) "
                        "and print its calibration error, on the first seed")
    args = parser.parse_args(argv)
    from hetflow.bench.cluster import cluster_from_stack, models_of
    from hetflow.bench.sweep import SweepSpec, load_trace, servable
    from hetflow.bench.sweep_cli import learned_source
    from hetflow.runtime.config import load_stack
    from hetflow.workloads.models import MODELS

    spec = SweepSpec.from_yaml(args.sweep)
    engines = cluster_from_stack(load_stack(Path(spec.cluster)))
    models = models_of(engines)
    if len(models) != 2:
        parser.error(f"{args.sweep}: the budget frontier needs a pool of two models, this one has {models}")
    small, large = sorted(models, key=lambda m: MODELS[m].params_b)
    compute = None if args.no_learned else learned_source(spec)
    by_seed, by_seed_tokens, first_seed, gaps = {}, {}, None, []
    for seed in (int(s) for s in args.seeds.split(",")) if args.seeds else spec.seeds:
        records, _ = servable(load_trace(spec, seed, models), engines)
        learned = compute(records, models) if compute and spec.router == "learned" else None
        firsts = [r for r in records if not r.depends_on]
        by_seed[seed] = frontier(firsts, small, large, learned, seed)
        gains_by_router = router_gains(firsts, small, large, learned, seed)
        gaps += [f"{name} on seed {seed}: " + ", ".join(f"{g:.3f}" for g in gap_quantiles(gains))
                 for name, gains in gains_by_router.items() if name != "random"]
        if learned is not None and learned.median_tokens:   # a learned predictor's token counts
            program_of = programs(records)
            tokens = [float(sum(r.output_tokens[large] for r in program_of[f.program_id])) for f in firsts]
            predicted = [learned.median_tokens[(f.program_id, f.stage_index, large)] for f in firsts]
            by_seed_tokens[seed] = token_frontier(firsts, gains_by_router, predicted, tokens, small, large)
        first_seed = first_seed or (seed, firsts, learned)
    print(f"## {spec.name}: {small} or {large} on each program's first call, expected task score "
          "(the item-response model's probabilities)")
    print(table(by_seed))
    if by_seed_tokens:
        print(f"\n## the token budget: programs by predicted gain per token the predictor expects on {large}")
        print(table(by_seed_tokens, TOKEN_SHARES, f"of {large}'s tokens"))
    print(f"\neach router's predicted gain of {large} at the quantiles {', '.join(f'{q:g}' for q in GAP_QUANTILES)} "
          "of the programs:\n" + "\n".join(gaps))
    if args.reliability and first_seed:
        seed, firsts, learned = first_seed
        diagrams = {(name, m): reliability(firsts, confidences, m)
                    for name, confidences in confidences_by_router(firsts, learned, (small, large)).items()
                    for m in (small, large)}
        print(f"\nexpected calibration error against the answers, seed {seed}: "
              + "; ".join(f"{name} {m} {error:.3f}" for (name, m), (_, error) in diagrams.items()))
        from hetflow.bench.plots import reliability_diagram

        print(reliability_diagram({k: v[0] for k, v in diagrams.items()}, args.reliability, spec.name))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
