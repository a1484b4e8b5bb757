"""Each agent's tool gaps, learned from the first call on (issue 35): the time from an agent's call
finishing to its program's next call reaching the monitor, when nothing else of the program was in
flight (the program was paused in a tool call). A retention rule reads them as a log-normal fit
(``hetflow.core.kv_retention``), as vLLM's router fits its rank's last 100 gaps, but per
(workflow, agent) and from the first sample rather than after 100.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque

from hetflow.core.kv_retention import LogNormalFit
from hetflow.core.monitor.recent import MAX_AGENTS, recent_entry

TOOL_GAP_WINDOW = 100
"""Gaps kept per agent: recent enough to follow a shift in the workload (the router's window)."""


class ToolGaps:
    def __init__(self, window: int = TOOL_GAP_WINDOW) -> None:
        self.window = window
        self._gaps: OrderedDict[tuple[str, str], deque[float]] = OrderedDict()
        """Most recently heard from last."""
        self._fits: dict[tuple[str, str], LogNormalFit | None] = {}

    def record(self, workflow: str, agent: str, gap_s: float) -> None:
        """One gap after a call of ``agent`` in ``workflow``; calls without an agent teach nothing."""
        if not agent or not (gap_s > 0 and math.isfinite(gap_s)):
            return
        key = (workflow, agent)
        recent_entry(self._gaps, key, lambda: deque(maxlen=self.window), MAX_AGENTS,
                     lambda gone: self._fits.pop(gone, None)).append(gap_s)
        self._fits.pop(key, None)

    def fit(self, workflow: str, agent: str) -> LogNormalFit | None:
        """The fit over the agent's gaps (None before its first), computed once per new gap; kept only for
        agents with gaps, so that the agents merely asked about (every snapshot asks) are not remembered."""
        key = (workflow, agent)
        gaps = self._gaps.get(key)
        if not gaps:
            return None
        if key not in self._fits:
            self._fits[key] = LogNormalFit.of(list(gaps))
        return self._fits[key]
