"""HexGen-Flow's alpha tuning (4.3): watch tail latency in sliding windows; on a significant regression,
replay the recent trace in the simulator for each alpha on a grid and keep the best (eq. 9-10).

The tuner runs off the request path: ``observe`` only appends; ``window_closed`` runs the test at the
end of a window; the grid search is a caller-supplied replay (the simulator), run in the background.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from scipy.stats import ttest_ind

from hetflow.core.stats import percentile

WINDOW_S = 100.0
"""HexGen-Flow's sliding window: the first 100 s serve with alpha = 0, then each window is tested."""
P_VALUE = 0.01
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


def regression_test(reference_s: Sequence[float], new_s: Sequence[float]) -> RegressionTest:
    """Eq. 9: a one-sided two-sample (Welch) t-test of the new window's latencies against the previous
    window's, H1: new > ref, reported with both windows' P95."""
    if len(reference_s) < 2 or len(new_s) < 2:
        return RegressionTest(percentile(reference_s, 0.95), percentile(new_s, 0.95), 1.0)
    p = float(ttest_ind(new_s, reference_s, equal_var=False, alternative="greater").pvalue)
    return RegressionTest(percentile(reference_s, 0.95), percentile(new_s, 0.95), p if p == p else 1.0)


def best_alpha(p95_for: Callable[[float], float], grid: Sequence[float] = ALPHA_GRID) -> tuple[float, dict[float, float]]:
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
