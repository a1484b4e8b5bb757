"""The balancer's own overload rule: refuse new calls, with a retry hint, before its process falls
behind, instead of letting gRPC's transport queue them unaccepted until it cancels them.

A call is refused (RESOURCE_EXHAUSTED) when the balancer already holds ``max_calls`` calls (deciding,
held or streaming), or when its event loop has run late by more than ``max_loop_lag_s`` for at least
``lag_sustain_s``: a loop that late for that long is short of CPU, and every call it takes on makes
every other call later. A burst the loop clears sooner (a hundred calls arriving at once, decided in a
few hundred milliseconds) is queued, not refused: refusing it would turn a moment's wait into failures
(docs/benchmarks.md measured a balancer shedding 9 to 75 of a 100-call burst it would have served).
Pure state; the loop's lag and the time are measured by the caller and passed in.

Why lag and not a queue length: gRPC Python's asyncio server accepts one call per turn of the event
loop, so calls past what it accepts wait inside gRPC, unseen by the handler, and only a loop whose
turns grow long shows them (docs/reliability.md measures it: a median lag of 0.1 ms at 8 calls/s, 4-10
ms at 3x the stack's saturated throughput). The lag is the median of the last few probes
(``LoopLag``), so one garbage-collection pause does not refuse calls.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

from hetflow.core.errors import ResourceExhausted


@dataclass
class LoadShedder:
    max_calls: int = 0
    """Calls in the balancer at once; 0 = no cap."""
    max_loop_lag_s: float = 0.0
    """How late the event loop may run before new calls are refused; 0 = never on lag."""
    lag_sustain_s: float = 0.0
    """For how long the loop must have run later than ``max_loop_lag_s`` before calls are refused."""
    retry_after_s: float = 1.0
    calls: int = 0
    loop_lag_s: float = 0.0
    late_since_s: float | None = None
    """Since when the loop has run later than ``max_loop_lag_s`` without a break; None while it keeps up."""

    def observe(self, loop_lag_s: float, now_s: float) -> None:
        """The loop's lag now (``LoopLag.lag_s``), from the caller's probe."""
        self.loop_lag_s = loop_lag_s
        if not self.max_loop_lag_s or loop_lag_s <= self.max_loop_lag_s:
            self.late_since_s = None
        elif self.late_since_s is None:
            self.late_since_s = now_s

    def enter(self, now_s: float) -> None:
        """Count a call in, or refuse it with when to try again."""
        if self.max_calls and self.calls >= self.max_calls:
            raise ResourceExhausted(f"the balancer holds {self.calls} calls; its limit is {self.max_calls}",
                                    retry_after_s=self.retry_after_s)
        if self.late_since_s is not None and now_s - self.late_since_s >= self.lag_sustain_s:
            raise ResourceExhausted(f"the balancer is overloaded (its event loop has run {self.loop_lag_s * 1e3:.1f} "
                                    f"ms late for {now_s - self.late_since_s:.1f} s; the limit is "
                                    f"{self.max_loop_lag_s * 1e3:.1f} ms for {self.lag_sustain_s:.1f} s)",
                                    retry_after_s=self.retry_after_s)
        self.calls += 1

    def leave(self) -> None:
        self.calls -= 1


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
