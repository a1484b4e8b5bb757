"""Statistics every benchmark and the alpha tuner share: percentiles, interval unions, stability."""

from __future__ import annotations

import statistics
from typing import Any, Iterable, Sequence

UNSTABLE_HALF_RATIO = 1.25  # second-half mean latency this much above the first half: queues still growing


def percentile(values: Sequence[float], q: float) -> float:
    """The q-quantile by linear interpolation between order statistics; NaN for no values."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def union_length_s(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length covered by the intervals, overlaps counted once."""
    total_s, reach_s = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach_s:
            total_s += end - max(start, reach_s)
            reach_s = end
    return total_s


def stability(latencies_in_arrival_order: Sequence[float], warmup_share: float = 0.0) -> dict[str, Any]:
    """The first half of the run against the second, by mean and by median latency (or slowdown: any
    per-program figure a growing queue raises), after leaving out the first ``warmup_share`` of it
    (programs that arrived at a system filling up from empty).

    A queue that keeps growing raises both; one heavy-tailed workflow raises only the mean, so a run
    is unstable when both ratios exceed ``UNSTABLE_HALF_RATIO``.
    """
    kept = latencies_in_arrival_order[int(len(latencies_in_arrival_order) * warmup_share):]
    half = len(kept) // 2
    first, second = kept[:half], kept[half:]
    mean_ratio = _ratio(statistics.mean(second), statistics.mean(first))
    median_ratio = _ratio(statistics.median(second), statistics.median(first))
    return {"first_half_mean_s": statistics.mean(first), "second_half_mean_s": statistics.mean(second),
            "ratio": mean_ratio, "median_ratio": median_ratio,
            "stable": not (mean_ratio > UNSTABLE_HALF_RATIO and median_ratio > UNSTABLE_HALF_RATIO)}


def _ratio(second: float, first: float) -> float:
    return second / first if first > 0 else float("inf")
