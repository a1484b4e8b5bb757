"""The balancer's own overload rule: refuse new calls, with a retry hint, before its process falls
behind, instead of letting gRPC's transport queue them unaccepted until it cancels them.

A call is refused (RESOURCE_EXHAUSTED) when the balancer already holds ``max_calls`` calls (deciding,
held or streaming), or when its event loop runs late by more than ``max_loop_lag_s``: a loop that late
is short of CPU, and every call it takes on makes every other call later. Pure state; the loop's lag
and the time are measured by the caller and passed in.

A call that only asks for a decision (the direct path's ``Decide``, the endpoint picker) costs the
balancer nothing once decided, so a late loop refuses it only while the oldest call still deciding
has waited longer than ``max_decision_wait_s``. A burst the balancer decides within that wait is then
taken whole, where the lag alone refused the tail of every 100-call burst on a busy host
(docs/benchmarks.md); overload that lasts grows the wait past it and is refused as before. This is
CoDel's distinction between a queue that drains and one that stands (Nichols and Jacobson, "Controlling
Queue Delay", 2012; RFC 8289), with the decision's wait as the sojourn time. The lag is kept beside it
so that calls waiting on a slow dependency (the monitor's timeout), not on the loop, are not refused.
A relayed call goes on costing the loop for every token it streams, so it is refused on the lag alone.

Why lag and not a queue length: gRPC Python's asyncio server accepts one call per turn of the event
loop, so calls past what it accepts wait inside gRPC, unseen by the handler, and only a loop whose
turns grow long shows them (docs/reliability.md measures it: a median lag of 0.1 ms at 8 calls/s, 4-10
ms at 3x the stack's saturated throughput). The lag is the median of the last few probes
(``LoopLag``), so one garbage-collection pause does not refuse calls.
"""

from __future__ import annotations

import contextlib
import itertools
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Iterator

from hetflow.core.errors import ResourceExhausted


@dataclass
class LoadShedder:
    max_calls: int = 0
    """Calls in the balancer at once; 0 = no cap."""
    max_loop_lag_s: float = 0.0
    """How late the event loop may run before new calls are refused; 0 = never on lag."""
    max_decision_wait_s: float = 0.0
    """How long the oldest call still deciding may have waited before a late loop refuses decide-only
    calls too; 0 = refuse them on the lag alone, as relayed calls."""
    retry_after_s: float = 1.0
    calls: int = 0
    _deciding: dict[int, float] = field(default_factory=dict)
    """Calls being decided now: a number each -> when its decision started, in the caller's clock (oldest first)."""
    _numbers: Iterator[int] = field(default_factory=itertools.count)

    def enter(self, loop_lag_s: float, now_s: float = 0.0, relays: bool = True) -> None:
        """Count a call in, or refuse it with when to try again. ``relays``: the balancer streams the
        call's tokens (False: it only decides it)."""
        if self.max_calls and self.calls >= self.max_calls:
            raise ResourceExhausted(f"the balancer holds {self.calls} calls; its limit is {self.max_calls}",
                                    retry_after_s=self.retry_after_s)
        if self.max_loop_lag_s and loop_lag_s > self.max_loop_lag_s:
            waited_s = self.oldest_decision_wait_s(now_s)
            if relays or not self.max_decision_wait_s:
                raise ResourceExhausted(f"the balancer is overloaded (its event loop runs {loop_lag_s * 1e3:.1f} ms "
                                        f"late; the limit is {self.max_loop_lag_s * 1e3:.1f} ms)",
                                        retry_after_s=self.retry_after_s)
            if waited_s > self.max_decision_wait_s:
                raise ResourceExhausted(f"the balancer is overloaded (its event loop runs {loop_lag_s * 1e3:.1f} ms "
                                        f"late and a call has waited {waited_s:.2f} s for its decision; the limits "
                                        f"are {self.max_loop_lag_s * 1e3:.1f} ms and {self.max_decision_wait_s:g} s)",
                                        retry_after_s=self.retry_after_s)
        self.calls += 1

    def leave(self) -> None:
        self.calls -= 1

    @contextlib.contextmanager
    def deciding(self, now_s: float) -> Iterator[None]:
        """Count a decision as under way from ``now_s`` until the block ends."""
        number = next(self._numbers)
        self._deciding[number] = now_s
        try:
            yield
        finally:
            del self._deciding[number]

    def oldest_decision_wait_s(self, now_s: float) -> float:
        """How long the oldest decision under way has taken so far; 0 with none."""
        for started_s in self._deciding.values():
            return max(0.0, now_s - started_s)
        return 0.0


@dataclass
class LoopLag:
    """How late the event loop runs timers: the median of the last ``window`` probes, in seconds."""

    window: int = 10
    samples_s: deque[float] = field(default_factory=deque)

    def add(self, late_s: float) -> float:
        """Record one probe's lateness and return the lag now."""
        self.samples_s.append(max(0.0, late_s))
        if len(self.samples_s) > self.window:
            self.samples_s.popleft()
        return self.lag_s

    @property
    def lag_s(self) -> float:
        return statistics.median(self.samples_s) if self.samples_s else 0.0
