"""A discrete-event loop in virtual seconds (after vidur's simulator loop)."""

from __future__ import annotations

import heapq
import itertools
from typing import Any, Callable


class EventLoop:
    def __init__(self) -> None:
        self.now = 0.0
        self._events: list[tuple[float, int, bool, Callable[..., None], tuple[Any, ...]]] = []
        self._seq = itertools.count()  # ties run in scheduling order: the run is deterministic
        self._work = 0
        """Events scheduled that are not background timers."""
        self._stopped = False

    def at(self, time_s: float, fn: Callable[..., None], *args: Any) -> None:
        self._push(time_s, False, fn, args)

    def every(self, interval_s: float, fn: Callable[[], object]) -> None:
        """Run ``fn`` every ``interval_s`` while other work remains: a background timer (the monitor's
        refreshes, engine reports) that never keeps the loop alive by itself."""
        def tick() -> None:
            fn()
            self._push(self.now + interval_s, True, tick, ())

        self._push(self.now + interval_s, True, tick, ())

    def run_until(self, time_s: float) -> None:
        """Run every event due by ``time_s`` (timers included), then stand at ``time_s``: a caller that
        acts at fixed steps (the RL router's environment) advances the loop one step at a time."""
        while self._events and self._events[0][0] <= time_s:
            self.now, _, background, fn, args = heapq.heappop(self._events)
            if not background:
                self._work -= 1
            fn(*args)
        self.now = max(self.now, time_s)

    @property
    def idle(self) -> bool:
        """No work left (only background timers, if any)."""
        return self._work == 0

    def stop(self) -> None:
        """End ``run`` after the event in progress, whatever work is left (``simulator.settle``)."""
        self._stopped = True

    def run(self) -> None:
        while self._work and not self._stopped:
            self.now, _, background, fn, args = heapq.heappop(self._events)
            if not background:
                self._work -= 1
            fn(*args)
        self._events.clear()

    def _push(self, time_s: float, background: bool, fn: Callable[..., None], args: tuple[Any, ...]) -> None:
        self._work += not background
        heapq.heappush(self._events, (max(time_s, self.now), next(self._seq), background, fn, args))
