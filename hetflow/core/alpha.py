"""HexGen-Flow's alpha tuning (4.3): watch tail latency in sliding windows; on a significant regression,
replay the recent trace in the simulator for each alpha on a grid and keep the best (eq. 9-10).

The tuner runs off the request path: ``observe`` only appends; ``window_closed`` runs the test at the
end of a window; the grid search is a caller-supplied replay (the simulator), run in the background.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from hetflow.core.stats import percentile

WINDOW_S = 100.0
"""HexGen-Flow's sliding window: the first 100 s serve with alpha = 0, then each window is tested."""
P_VALUE = 0.01
BOOTSTRAP_RESAMPLES = 400
"""Resamples behind each window's P95 standard error."""
ALPHA_GRID = tuple(round(0.1 * i, 1) for i in range(11))
"""alpha in {0.0, 0.1, ..., 1.0} (4.3, simulation-guided auto-tuning)."""


@dataclass(frozen=True)
class RegressionTest:
    p95_ref_s: float
    p95_new_s: float
    p_value: float

    @property
    def regressed(self) -> bool:
        """H1 of eq. 9 accepted: the new window's latency is significantly higher (p < 0.01)."""
        return self.p_value < P_VALUE


def p95_standard_error_s(latencies_s: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES) -> float:
    """Bootstrap standard error of a window's P95 (seeded: the same window gives the same answer)."""
    values = np.asarray(latencies_s, dtype=float)
    draws = np.random.default_rng(0).choice(values, size=(resamples, len(values)), replace=True)
    return float(np.percentile(draws, 95, axis=1).std(ddof=1))


def regression_test(reference_s: Sequence[float], new_s: Sequence[float]) -> RegressionTest:
    """Eq. 9, H0: T_new = T_ref against H1: T_new > T_ref, where T is a window's 95th-percentile latency
    (4.3: "computes the 95th percentile latency T_new ... and compares it against ... T_ref"). A one-sided
    two-sample Welch t-test on the two P95 estimates: t = (T_new - T_ref) / sqrt(se_new^2 + se_ref^2),
    each standard error by bootstrap, Welch-Satterthwaite degrees of freedom."""
    p95_ref, p95_new = percentile(reference_s, 0.95), percentile(new_s, 0.95)
    if len(reference_s) < 2 or len(new_s) < 2:
        return RegressionTest(p95_ref, p95_new, 1.0)
    var_ref, var_new = p95_standard_error_s(reference_s) ** 2, p95_standard_error_s(new_s) ** 2
    if var_ref + var_new == 0.0:  # both windows constant: the difference is exact
        return RegressionTest(p95_ref, p95_new, 0.0 if p95_new > p95_ref else 1.0)
    t_stat = (p95_new - p95_ref) / np.sqrt(var_ref + var_new)
    dof = (var_ref + var_new) ** 2 / (var_ref ** 2 / (len(reference_s) - 1) + var_new ** 2 / (len(new_s) - 1))
    from scipy.stats import t as student_t  # imported by the regression test alone (heavy)

    return RegressionTest(p95_ref, p95_new, float(student_t.sf(t_stat, dof)))


def best_alpha(p95_for: Callable[[float], float], grid: Sequence[float] = ALPHA_GRID
               ) -> tuple[float, dict[float, float]]:
    """Eq. 10: alpha* = argmin_alpha T_0.95(alpha) over the grid, by replaying the trace for each alpha."""
    p95 = {alpha: p95_for(alpha) for alpha in grid}
    return min(grid, key=lambda a: (p95[a], a)), p95


@dataclass
class AlphaTuner:
    """Windows of finished workflows' latencies; says when to re-tune."""

    window_s: float = WINDOW_S
    alpha: float = 0.0
    """Initialised to 0: queue length first (4.3, initialization)."""
    _window_start_s: float = 0.0
    _current: list[float] = field(default_factory=list)
    _reference: list[float] = field(default_factory=list)
    history: list[tuple[float, RegressionTest]] = field(default_factory=list)

    def observe(self, finished_s: float, latency_s: float) -> RegressionTest | None:
        """Record one finished workflow; at a window's end, the test of that window against the last
        (None otherwise). A regression means: re-tune on the recent trace."""
        result = None
        if finished_s - self._window_start_s >= self.window_s:
            result = self.window_closed(finished_s)
        self._current.append(latency_s)
        return result

    def window_closed(self, now_s: float) -> RegressionTest | None:
        result = regression_test(self._reference, self._current) if self._reference else None
        if result is not None:
            self.history.append((now_s, result))
        self._reference, self._current, self._window_start_s = self._current, [], now_s
        return result
