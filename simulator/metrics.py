"""What a run reports: workflow latency, latency per output token, task score, throughput,
queueing share and a stability check (the first half of the run against the second)."""

from __future__ import annotations

import statistics
from typing import Sequence

from hetflow.bench.common import percentile, stability
from simulator.run import ProgramResult


def summarize(results: Sequence[ProgramResult]) -> dict:
    if not results:
        return {"programs": 0}
    ordered = sorted(results, key=lambda r: r.arrival_s)
    latency = [r.latency_s for r in ordered]
    span = max(r.finished_s for r in ordered) - min(r.arrival_s for r in ordered)
    return {
        "programs": len(ordered),
        "latency_s": {"mean": statistics.mean(latency), "p50": percentile(latency, 0.5),
                      "p95": percentile(latency, 0.95), "p99": percentile(latency, 0.99)},
        "latency_per_output_token_ms": 1e3 * statistics.mean(r.latency_s / max(1, r.output_tokens) for r in ordered),
        "task_score": statistics.mean(float(r.correct) for r in ordered),
        "throughput_tokens_per_s": sum(r.output_tokens for r in ordered) / span if span > 0 else 0.0,
        "queueing_share": sum(r.queued_s for r in ordered) / sum(latency) if sum(latency) else 0.0,
        "preemptions": sum(c.preemptions for r in ordered for c in r.calls.values()),
        "models": {m: sum(r.model == m for r in ordered) for m in sorted({r.model for r in ordered})},
        "stability": stability(latency),
    }
