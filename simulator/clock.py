"""A discrete-event loop in virtual seconds (after vidur's simulator loop)."""

from __future__ import annotations

import heapq
import itertools
from typing import Any, Callable


class EventLoop:
    def __init__(self) -> None:
        self.now = 0.0
        self._events: list[tuple[float, int, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = itertools.count()  # ties run in scheduling order: the run is deterministic

    def at(self, time_s: float, fn: Callable[..., None], *args: Any) -> None:
        heapq.heappush(self._events, (max(time_s, self.now), next(self._seq), fn, args))

    @property
    def pending(self) -> int:
        """Events scheduled and not yet run."""
        return len(self._events)

    def run(self) -> None:
        while self._events:
            self.now, _, fn, args = heapq.heappop(self._events)
            fn(*args)
