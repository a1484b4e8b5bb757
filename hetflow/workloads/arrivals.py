"""Arrival times of programs: Poisson, bursty (gamma inter-arrivals), or replayed timestamps."""

from __future__ import annotations

import random
from typing import Sequence


def poisson(n: int, rate_per_s: float, rng: random.Random) -> list[float]:
    return gamma(n, rate_per_s, 1.0, rng)


def gamma(n: int, rate_per_s: float, cv: float, rng: random.Random) -> list[float]:
    """Inter-arrival times from a gamma law of mean 1/rate and coefficient of variation ``cv``
    (cv = 1 is Poisson; cv > 1 is bursty, as in the serving literature's gamma-process traces)."""
    if rate_per_s <= 0 or cv <= 0:
        raise ValueError("rate and cv must be > 0")
    shape = 1.0 / cv ** 2
    scale = 1.0 / (rate_per_s * shape)
    t, out = 0.0, []
    for _ in range(n):
        t += rng.gammavariate(shape, scale)
        out.append(t)
    return out


def replay(timestamps: Sequence[float], n: int) -> list[float]:
    """The first ``n`` timestamps, shifted to start at 0 (seconds)."""
    if len(timestamps) < n:
        raise ValueError(f"{len(timestamps)} timestamps to replay, {n} programs asked for")
    ordered = sorted(timestamps)[:n]
    return [t - ordered[0] for t in ordered]
