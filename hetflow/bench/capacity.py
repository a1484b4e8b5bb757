"""Capacity at SLO, the headline metric: the highest arrival rate at which a run is stable, loses no
call, and finishes at least ``attainment`` of its workflows within ``slo_scale`` times their exclusive
latency (the program alone on the cluster, ``simulator.run.reference_latency_s``).

A run is stable when no queue keeps growing once the system has filled up (the steady-state check,
``simulator.metrics.steady_stability``: the later two thirds of its programs, first half against
second, on slowdowns and on the time their calls waited), and sustained when its
trace arrives over at least ``span_latencies`` median latencies (a finite trace at a high enough rate
arrives at once, a batch that can meet a loose SLO without saying anything about a rate). A rate above
the trace's work ceiling on the cluster (``hetflow.bench.work_ceiling``: what the engines could finish if
every one were busy all the time with an ideal prefix cache) fails as well: no schedule sustains it,
and a finite trace that meets the SLO there shows only how long a burst the SLO absorbs (a sweep fails such
a rate without running it).

The rule is fixed before any policy runs: the same SLO, the same bisection, the same traces for
every policy. ``find_capacity`` brackets the capacity by doubling or halving the rate from a start,
then bisects on log(rate) until the bracket is within ``rel_tol``; every probe is kept, so a report
can show each run and draw latency against load. Capacity assumes that a rate that fails, every
higher rate fails too (more load never makes a queue shorter); the probes let a reader check it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

NO_PROGRAMS, REJECTED, NOT_SUSTAINED, UNSTABLE, BELOW_SLO, ABOVE_WORK_CEILING = (
    "no programs", "rejected calls", "not sustained", "unstable", "below SLO", "above the work ceiling")


@dataclass(frozen=True)
class SloRule:
    slo_scale: float = 5.0
    """X: a workflow meets the SLO when it finishes within X times its exclusive latency."""
    attainment: float = 0.95
    """The share of workflows that must meet it."""
    span_latencies: float = 4.0
    """The trace must arrive over at least this many median workflow latencies of the run: otherwise
    the run measures a batch, not a sustained rate, and cannot pass."""

    def __post_init__(self) -> None:
        if self.slo_scale < 1.0 or not 0.0 < self.attainment <= 1.0:
            raise ValueError(f"SLO rule needs slo_scale >= 1 and 0 < attainment <= 1, got {self}")

    def failures(self, summary: Mapping[str, Any]) -> tuple[str, ...]:
        """The conditions a run's summary (``hetflow.bench.sweep.simulate``) fails, in the rule's order;
        empty when it meets the rule. A run stopped once its failure was settled (``simulator.settle``) failed
        the SLO and, if it lost a call, for that; its other figures cover only what ran, so nothing else is read."""
        if summary.get("settled"):
            return ((REJECTED,) if summary.get("rejected_calls") else ()) + (BELOW_SLO,)
        if not summary.get("programs"):
            return (NO_PROGRAMS,)
        checks = ((REJECTED, bool(summary.get("rejected_calls"))),
                  (NOT_SUSTAINED, summary["arrival_span_s"] < self.span_latencies * summary["latency_s"]["p50"]),
                  (UNSTABLE, not summary["steady_stability"]["stable"]),
                  (BELOW_SLO, summary["within_slo_share"] < self.attainment))
        return tuple(name for name, failed in checks if failed)

    def met_by(self, summary: Mapping[str, Any]) -> bool:
        return not self.failures(summary)


@dataclass(frozen=True)
class Probe:
    rate_per_s: float
    passed: bool
    summary: Mapping[str, Any] = field(default_factory=dict)
    failures: tuple[str, ...] = ()
    """The rule's conditions the run failed (``SloRule.failures``)."""


@dataclass(frozen=True)
class Capacity:
    rate_per_s: float
    """The highest rate that passed (0 when none down to the floor did)."""
    failed_above_per_s: float | None
    """The lowest rate that failed above it (None when none up to the ceiling did)."""
    probes: tuple[Probe, ...]

    @property
    def trace_bound(self) -> bool:
        """The rate just above failed only for not being sustained: the trace is too short to tell
        whether the system holds that rate, so the capacity is a lower bound set by the trace's length,
        not by the policy (a longer trace is needed to measure it)."""
        above = [p for p in self.probes if self.failed_above_per_s is not None
                 and p.rate_per_s == self.failed_above_per_s]
        return bool(above) and above[-1].failures == (NOT_SUSTAINED,)

    @property
    def search_bound(self) -> bool:
        """The search's highest rate passed: the capacity is at least that, a lower bound set by the search."""
        return self.failed_above_per_s is None and self.rate_per_s > 0


def find_capacity(probe: Callable[[float], Probe], start_rate_per_s: float, rel_tol: float = 0.03,
                  min_rate_per_s: float = 1e-3, max_rate_per_s: float = 1e3, first_step: float = 2.0) -> Capacity:
    """Bracket, then bisect on log(rate), until ``failed_above / rate <= 1 + rel_tol``. Doubling stops at
    ``max_rate_per_s``, which is probed itself; when it passes, the capacity is that lower bound.
    ``first_step``: the bracket's first factor from the start, each further one its square up to doubling
    (1.1, 1.21, 1.46, 2, 2...): from a start known to lie near the capacity (a live door's simulated
    twin's), ``1 + rel_tol`` brackets it in two probes when the start is right."""
    if start_rate_per_s <= 0 or rel_tol <= 0 or not 1.0 < first_step <= 2.0:
        raise ValueError("start rate and rel_tol must be > 0, and 1 < first_step <= 2")
    probes: list[Probe] = []
    step = first_step

    def run(rate: float) -> bool:
        probes.append(probe(rate))
        return probes[-1].passed

    def grown() -> float:
        nonlocal step
        used, step = step, min(step * step, 2.0)
        return used

    lo: float | None
    hi: float | None
    if run(start_rate_per_s):
        lo, hi = start_rate_per_s, min(start_rate_per_s * grown(), max_rate_per_s)
        while lo < max_rate_per_s and run(hi):
            lo, hi = hi, min(hi * grown(), max_rate_per_s)
        if lo >= max_rate_per_s:
            return Capacity(lo, None, tuple(probes))
    else:
        lo, hi = start_rate_per_s / grown(), start_rate_per_s
        while not run(lo):
            lo, hi = lo / grown(), lo
            if lo < min_rate_per_s:
                return Capacity(0.0, hi, tuple(probes))
    while hi / lo > (1 + rel_tol) * (1 + 1e-12):   # a bracket of one step, rounding aside (1.821 * 1.1)
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if run(mid) else (lo, mid)
    return Capacity(lo, hi, tuple(probes))
