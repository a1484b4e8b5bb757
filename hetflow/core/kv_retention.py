"""How long to keep a paused program's KV for its next call: Continuum's utility (arXiv 2511.02230), as
vLLM's router computes its acting TTL (vllm-project/router ``policy.rs`` @ 1aa3500,
``fitted_acting_ttl``), with the holding cost weighted.

For a tool gap ``T`` fitted log-normal (``mu``, ``sigma`` of ``ln T``), a hold of ``d`` seconds is worth

    U(d) = P(T < d) C - w (E[T; T < d] + d P(T >= d))

``C`` the seconds a cache miss costs, ``w`` what a second of held room costs the calls behind it (the
router's ``w`` is 1). The best ``d`` is searched over 0, 50 ms and 32 log-spaced candidates up to
``max_hold_s``; 0 when no hold is worth anything.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

CANDIDATES = 32
SHORTEST_HOLD_S = 0.05


def normal_cdf(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


@dataclass(frozen=True)
class LogNormalFit:
    """A fit of ``ln T`` over observed gaps: mean, standard deviation, how many gaps."""

    mu: float
    sigma: float
    samples: int

    @classmethod
    def of(cls, gaps_s: list[float], min_sigma: float = 1e-6) -> LogNormalFit | None:
        logs = [math.log(t) for t in gaps_s if t > 0 and math.isfinite(t)]
        if not logs:
            return None
        mu = sum(logs) / len(logs)
        sigma = math.sqrt(sum((x - mu) ** 2 for x in logs) / len(logs))
        return cls(mu, max(sigma, min_sigma), len(logs))

    def within(self, hold_s: float) -> float:
        """P(T < hold_s)."""
        return normal_cdf((math.log(hold_s) - self.mu) / self.sigma) if hold_s > 0 else 0.0


def hold_utility_s(fit: LogNormalFit, hold_s: float, miss_impact_s: float, hold_cost_per_s: float) -> float:
    """``U(d)`` above, in seconds."""
    if hold_s <= 0:
        return 0.0
    hit = fit.within(hold_s)
    mean_s = math.exp(fit.mu + fit.sigma * fit.sigma / 2)
    truncated_s = mean_s * normal_cdf((math.log(hold_s) - fit.mu - fit.sigma * fit.sigma) / fit.sigma)
    return miss_impact_s * hit - hold_cost_per_s * (truncated_s + hold_s * (1.0 - hit))


def best_hold_s(fit: LogNormalFit, miss_impact_s: float, max_hold_s: float, hold_cost_per_s: float = 1.0
                ) -> tuple[float, float]:
    """The hold in ``[0, max_hold_s]`` of the highest utility, and that utility (0 s and 0 when none pays)."""
    if max_hold_s <= 0:
        return 0.0, 0.0
    low_s = min(SHORTEST_HOLD_S, max_hold_s)
    candidates = [0.0, low_s, max_hold_s]
    if max_hold_s > low_s:
        step = (math.log(max_hold_s) - math.log(low_s)) / (CANDIDATES - 1)
        candidates += [math.exp(math.log(low_s) + step * i) for i in range(CANDIDATES)]
    best_s, best_utility = 0.0, -math.inf
    for hold_s in candidates:
        utility = hold_utility_s(fit, hold_s, miss_impact_s, hold_cost_per_s)
        if utility >= best_utility:
            best_s, best_utility = hold_s, utility
    return best_s, best_utility  # never below U(0) = 0: no hold is always a candidate
