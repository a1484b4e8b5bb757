"""The working-set gate's inputs through a probe, live and in its simulated twin (docs/vllm-sim.md, issue
64): the engines' resident tokens, programs and growth to come (``MonitorState.resident``, what the gate
counts against each engine's KV) and the calls held for KV room, sampled every ``SAMPLE_S`` of GPU time from the trace's
start. Where a live door holds calls longer than its twin, the two series say from when, and whether the
gate counted more (resident tokens) or found room later for the same counts.

Live they are read from the monitor's and the balancer's ``/metrics`` (``hetflow_monitor_resident_tokens``,
``hetflow_monitor_resident_programs``, ``hetflow_monitor_resident_growth_tokens``,
``hetflow_balancer_held_calls``); in the twin from the simulation's
monitor and decision loop, by the same ``resident`` rule."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from statistics import fmean
from typing import Any, Sequence

from prometheus_client.parser import text_string_to_metric_families

SAMPLE_S = 10.0
"""Seconds of GPU time between two samples."""
RESIDENT_TOKENS = "hetflow_monitor_resident_tokens"
RESIDENT_PROGRAMS = "hetflow_monitor_resident_programs"
HELD_CALLS = "hetflow_balancer_held_calls"
RESIDENT_GROWTH_TOKENS = "hetflow_monitor_resident_growth_tokens"


@dataclass(frozen=True)
class GateSample:
    resident_tokens: float
    """Summed over the engines."""
    resident_programs: float
    held_calls: float
    resident_growth_tokens: float = 0.0
    """Summed over the engines: what the gate counts ``growth_share`` of."""


def gate_sample_of(metrics_texts: Sequence[str]) -> GateSample:
    """A sample from the services' ``/metrics`` pages (the monitor's and the balancer's), each gauge summed
    over its engines."""
    sums = {RESIDENT_TOKENS: 0.0, RESIDENT_PROGRAMS: 0.0, HELD_CALLS: 0.0, RESIDENT_GROWTH_TOKENS: 0.0}
    for text in metrics_texts:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in sums:
                    sums[sample.name] += sample.value
    return GateSample(sums[RESIDENT_TOKENS], sums[RESIDENT_PROGRAMS], sums[HELD_CALLS], sums[RESIDENT_GROWTH_TOKENS])


@dataclass
class GateSeries:
    t_s: list[float] = field(default_factory=list)
    """Seconds of GPU time since the trace's start."""
    resident_tokens: list[float] = field(default_factory=list)
    resident_programs: list[float] = field(default_factory=list)
    held_calls: list[float] = field(default_factory=list)
    resident_growth_tokens: list[float] = field(default_factory=list)

    def add(self, t_s: float, sample: GateSample) -> None:
        self.t_s.append(round(t_s, 1))
        self.resident_tokens.append(sample.resident_tokens)
        self.resident_programs.append(sample.resident_programs)
        self.held_calls.append(sample.held_calls)
        self.resident_growth_tokens.append(sample.resident_growth_tokens)

    def summary(self, until_s: float) -> dict[str, dict[str, float]]:
        """Each input's mean over the first and the second half of ``[0, until_s]`` (the trace's arrivals)."""
        halves = {"first_half": (0.0, until_s / 2), "second_half": (until_s / 2, until_s)}
        out: dict[str, dict[str, float]] = {}
        for name in ("resident_tokens", "resident_programs", "held_calls", "resident_growth_tokens"):
            values = getattr(self, name)
            out[name] = {half: fmean(v for t, v in zip(self.t_s, values) if lo <= t < hi)
                         for half, (lo, hi) in halves.items()
                         if any(lo <= t < hi for t in self.t_s)}
        return out

    def to_row(self, until_s: float) -> dict[str, Any]:
        """The row's ``gate``: the series and its halves' means."""
        return {"series": asdict(self), "means": self.summary(until_s)}

    def row_entry(self, until_s: float | None) -> dict[str, Any]:
        """``{"gate": ...}`` for a probe's row over ``[0, until_s]`` (its arrival span, or where a stopped
        probe stopped); empty without samples or a span."""
        return {"gate": self.to_row(until_s)} if self.t_s and until_s is not None else {}
