"""Each workflow stage's mean execution cost, learned from the calls admitted to it (HexGen-Flow 4.2).

Eq. 5 splits the time left to a query's deadline over its remaining stages in proportion to each
stage's mean cost t-bar_comp (eq. 6, the call's cost averaged over all instances). When a call is
dispatched its later stages do not exist yet, so their costs are estimated per stage from earlier runs
of the same workflow: the mean of the last ``window`` admitted calls of that (workflow, stage). A
stage's calls running in parallel (a fan-out at one level) share its index.
"""

from __future__ import annotations

from collections import OrderedDict, deque

from hetflow.core.monitor.recent import MAX_AGENTS, recent_entry

STAGE_COST_WINDOW = 256
"""Admitted calls per stage the mean is taken over: recent enough to follow a shift in the workload."""


class StageCosts:
    def __init__(self, window: int = STAGE_COST_WINDOW) -> None:
        self.window = window
        self._costs: OrderedDict[tuple[str, int], deque[float]] = OrderedDict()
        """Most recently heard from last, at most ``MAX_AGENTS`` (workflow, stage) keys."""
        self._sums: dict[tuple[str, int], float] = {}

    def record(self, workflow: str, stage_index: int, mean_cost_s: float) -> None:
        """One admitted call's eq. 6 cost; calls without a workflow or stage teach nothing."""
        if not workflow or stage_index < 1 or not mean_cost_s > 0.0:
            return
        key = (workflow, stage_index)
        costs = recent_entry(self._costs, key, deque, MAX_AGENTS, lambda gone: self._sums.pop(gone, None))
        if len(costs) == self.window:
            self._sums[key] -= costs.popleft()
        costs.append(mean_cost_s)
        self._sums[key] = self._sums.get(key, 0.0) + mean_cost_s

    def mean_s(self, workflow: str, stage_index: int) -> float:
        """The stage's mean cost, 0 when none of its calls has been seen."""
        key = (workflow, stage_index)
        costs = self._costs.get(key)
        return self._sums[key] / len(costs) if costs else 0.0

    def later_stages_s(self, workflow: str, stage_index: int, stage_count: int) -> tuple[float, ...]:
        """Mean costs of stages stage_index+1 .. stage_count (0 for a stage not seen yet)."""
        return tuple(self.mean_s(workflow, k) for k in range(stage_index + 1, stage_count + 1))
