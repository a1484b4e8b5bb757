"""What a run reports (issue 4's metric list): workflow latency (mean, P50, P95, P99), latency per
output token, makespan, task score, SLO attainment against SLO scale and the smallest scale with 95%
attainment (HexGen-Flow 5.1), throughput, goodput, preemptions, queueing share, scheduler overhead
and a stability check (the first half of the run against the second)."""

from __future__ import annotations

import statistics
from typing import Callable, Sequence, TypeVar

from hetflow.core.stats import UNSTABLE_HALF_RATIO, percentile, stability
from simulator.run import ProgramResult

SLO_SCALES = (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 20.0)
GOODPUT_SLO_SCALE = 5.0
"""Goodput counts workflows finished within this many times their isolated latency."""
TARGET_ATTAINMENT = 0.95
WARMUP_SHARE = 1 / 3
"""The first third of a run's programs arrive while the system fills up from empty; the steady-state
stability check leaves them out (capacity at SLO reads it)."""


T = TypeVar("T")


def longest_decile(items: Sequence[T], exclusive_s: Callable[[T], float]) -> list[T]:
    """The tenth of ``items`` (at least one) with the longest exclusive latency: the programs whose P95 a
    run reports beside its own (``summarize``), and whose floors ``hetflow.bench.latency_floor`` bounds it by."""
    by_size = sorted(items, key=exclusive_s)
    return by_size[len(by_size) - max(1, len(by_size) // 10):]


MATERIAL_QUEUEING_SHARE = 0.02
"""Below this share of the later half's latency spent waiting, no queue is what slows its workflows."""


def steady_stability(results_in_arrival_order: Sequence[ProgramResult]) -> dict:
    """The steady-state stability check that capacity at SLO reads: the first half against the second,
    after the warm-up third. Unstable means a queue that keeps growing, so two things must both grow:
    - each workflow's slowdown (latency over its exclusive latency; not its latency, which a few long
      workflows arriving late raise without any queue: issue 32, the code family's verdicts flipped
      between neighbouring rates on that);
    - the time its calls waited (engine queues, balancer holds, after preemptions), by the same ratio
      in the mean, with at least ``MATERIAL_QUEUEING_SHARE`` of the later half's latency spent waiting.
    Slowdowns also rise without any wait while the trace is shorter than its longest workflows: the
    batches keep filling as long workflows pile up, each decode iteration takes longer, and a run at
    0.1% queueing was called unstable (issue 32, the code sweep over five seeds)."""
    results = results_in_arrival_order
    values = ([r.latency_s / r.isolated_s for r in results] if all(r.isolated_s > 0 for r in results)
              else [r.latency_s for r in results])  # no exclusive latency: latencies
    warmup = WARMUP_SHARE if len(values) >= 6 else 0.0
    check = stability(values, warmup)
    waits = stability([r.queued_s for r in results], warmup)  # the same halves, on the time spent waiting
    second_share = waits["second_half_mean_s"] / max(1e-12, stability([r.latency_s for r in results], warmup)
                                                     ["second_half_mean_s"])
    queue_grew = waits["ratio"] > UNSTABLE_HALF_RATIO and second_share >= MATERIAL_QUEUEING_SHARE
    return {**check, "slowdown_stable": check["stable"],
            "wait_ratio": waits["ratio"] if waits["first_half_mean_s"] > 0 else None,
            "second_half_queueing_share": second_share, "stable": check["stable"] or not queue_grew}


def slo_scale_for(results: Sequence[ProgramResult], attainment: float = TARGET_ATTAINMENT) -> float:
    """Smallest SLO scale s at which ``attainment`` of the workflows finish within s x isolated latency."""
    return percentile([r.latency_s / r.isolated_s for r in results if r.isolated_s > 0], attainment)


def queueing_share(results: Sequence[ProgramResult]) -> float:
    """The share of the programs' latency during which at least one of a program's calls waited."""
    latency_s = sum(r.latency_s for r in results)
    return sum(r.queued_s for r in results) / latency_s if latency_s else 0.0


def summarize(results: Sequence[ProgramResult], decision_ms: Sequence[float] = (),
              slo_scale: float = GOODPUT_SLO_SCALE) -> dict:
    """``slo_scale``: X of goodput and of the share of workflows within X times their exclusive latency."""
    if not results:
        return {"programs": 0}
    ordered = sorted(results, key=lambda r: r.arrival_s)
    latency = [r.latency_s for r in ordered]
    span = max(r.finished_s for r in ordered) - min(r.arrival_s for r in ordered)
    slowdown = [r.latency_s / r.isolated_s for r in ordered if r.isolated_s > 0]
    labelled = [r for r in ordered if r.correct is not None]
    with_probability = [r.solve_probability for r in ordered if r.solve_probability is not None]
    with_deadline = [r for r in ordered if r.deadline_s]
    within = sum(1 for r in ordered if r.latency_s <= slo_scale * r.isolated_s)
    longest = [r.latency_s for r in longest_decile(ordered, lambda r: r.isolated_s)]
    return {
        "programs": len(ordered),
        "latency_s": {"mean": statistics.mean(latency), "p50": percentile(latency, 0.5),
                      "p95": percentile(latency, 0.95), "p99": percentile(latency, 0.99)},
        "latency_per_output_token_ms": 1e3 * statistics.mean(r.latency_s / max(1, r.output_tokens) for r in ordered),
        "makespan_s": span,
        "task_score": statistics.mean(float(bool(r.correct)) for r in labelled) if labelled else None,
        "expected_task_score": statistics.mean(with_probability) if with_probability else None,
        "slo": {"attainment": {f"{s:g}": sum(x <= s for x in slowdown) / len(slowdown) for s in SLO_SCALES},
                "scale_for_95pct": slo_scale_for(ordered)},
        "deadline_attainment": _met(with_deadline),
        "deadline_attainment_by_tenant": {t: _met([r for r in with_deadline if r.tenant == t])
                                          for t in sorted({r.tenant for r in with_deadline})},
        "throughput_tokens_per_s": sum(r.output_tokens for r in ordered) / span if span > 0 else 0.0,
        "throughput_programs_per_s": len(ordered) / span if span > 0 else 0.0,
        "goodput_programs_per_s": within / span if span > 0 else 0.0,
        "goodput_slo_scale": slo_scale,
        "within_slo_share": within / len(ordered),
        "longest_decile_p95_s": percentile(longest, 0.95),
        "queueing_share": queueing_share(ordered),
        "preemptions": sum(c.preemptions for r in ordered for c in r.calls.values()),
        "models": {m: sum(r.model == m for r in ordered) for m in sorted({r.model for r in ordered})},
        "scheduler_overhead_ms": {"mean": statistics.mean(decision_ms), "p50": percentile(decision_ms, 0.5),
                                  "p99": percentile(decision_ms, 0.99)}
        if decision_ms else None,
        "stability": stability(latency),
        "steady_stability": steady_stability(ordered),
        "arrival_span_s": ordered[-1].arrival_s - ordered[0].arrival_s,
    }


def _met(results: Sequence[ProgramResult]) -> float | None:
    """Share of the programs finished by their deadline; None without deadlines."""
    return sum(r.finished_s <= r.deadline_s for r in results) / len(results) if results else None
