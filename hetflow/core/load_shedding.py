"""The balancer's own overload rule: refuse new calls, with a retry hint, before its process falls
behind, instead of letting gRPC's transport queue them unaccepted until it cancels them.

A call is refused (RESOURCE_EXHAUSTED) when the balancer already holds ``max_calls`` calls (deciding,
held or streaming), or when its event loop runs late by more than ``max_loop_lag_s``: a loop that late
is short of CPU, and every call it takes on makes every other call later. Pure state; the loop's lag
(and, for the burst allowance, each probe's interval) is measured by the caller and passed in.

A call that only asks for a decision (the direct path's ``Decide``, the endpoint picker) costs the
balancer nothing once decided, so a late loop still takes up to ``burst_calls`` of them: an allowance
spent only while the loop runs late, and earned back only while it runs on time (``burst_calls`` per
``burst_refill_s`` of probes that each woke on time). A burst that size is taken whole, where the lag alone refused
the tail of every 100-call burst on a busy host (docs/benchmarks.md); overload that lasts keeps the
loop late, so once the allowance is spent it is refused as before. A relayed call goes on costing the
loop for every token it streams, so it gets no allowance.

Tried first and measured worse (docs/benchmarks.md), at twice the host's rate of decisions:
- refusing decide-only calls on a late loop only while the oldest decision under way had waited past a
  second: a call's wait in gRPC's own queue, before the handler runs, is not part of that, so the loop
  decided every call it accepted while the queue in front of it grew (the client's median time to a
  decision 5 s against 0.4 s);
- the same allowance earned back by the clock (a plain token bucket, 128 calls per 10 s): the calls it
  let in beyond the lag rule, on a host already out of CPU, made a queue of their own (2.4 s).

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
    burst_calls: int = 0
    """Decide-only calls a late loop still takes (the allowance when full); 0 = none."""
    burst_refill_s: float = 10.0
    """Seconds of an on-time loop for a spent allowance to come back whole."""
    retry_after_s: float = 1.0
    calls: int = 0
    burst_allowance: float = field(init=False)
    """Decide-only calls a late loop may still take now (full at the start)."""

    def __post_init__(self) -> None:
        if self.burst_calls < 0 or self.burst_refill_s <= 0:
            raise ValueError(f"burst_calls must be >= 0 and burst_refill_s > 0, got {self.burst_calls} and "
                             f"{self.burst_refill_s}")
        self.burst_allowance = float(self.burst_calls)

    def enter(self, loop_lag_s: float, relays: bool = True, standing_wait_s: float = 0.0) -> bool:
        """Count a call in, or refuse it with when to try again. ``relays``: the balancer streams the
        call's tokens (False: it only decides it). ``standing_wait_s``: the standing queue of calls
        waiting to be taken (``AcceptWaits``; 0: none). True when the call spent burst allowance
        (``leave`` gives it back if the call is refused after all)."""
        if self.max_calls and self.calls >= self.max_calls:
            raise ResourceExhausted(f"the balancer holds {self.calls} calls; its limit is {self.max_calls}",
                                    retry_after_s=self.retry_after_s)
        late = bool(self.max_loop_lag_s) and loop_lag_s > self.max_loop_lag_s
        if late or standing_wait_s:
            if relays or self.burst_allowance < 1.0:
                why = (f"its event loop runs {loop_lag_s * 1e3:.1f} ms late; the limit is "
                       f"{self.max_loop_lag_s * 1e3:.1f} ms" if late else
                       f"calls wait {standing_wait_s * 1e3:.0f} ms for it to take them")
                raise ResourceExhausted(f"the balancer is overloaded ({why})", retry_after_s=self.retry_after_s)
            self.burst_allowance -= 1.0  # a decide-only call taken on a late loop
        self.calls += 1
        return late or bool(standing_wait_s)

    def leave(self, refund_burst: bool = False) -> None:
        """Count a call out; ``refund_burst``: it was refused after spending allowance (``enter``)."""
        self.calls -= 1
        if refund_burst:
            self.burst_allowance = min(float(self.burst_calls), self.burst_allowance + 1.0)

    def probed(self, late_s: float, interval_s: float) -> None:
        """One probe of the loop, asked to wake ``interval_s`` after the last and woken ``late_s`` late:
        on time, it earns back ``interval_s``'s share of the allowance (a late wake earns nothing, however
        long it was)."""
        if late_s <= self.max_loop_lag_s:
            self.burst_allowance = min(float(self.burst_calls),
                                       self.burst_allowance + self.burst_calls * interval_s / self.burst_refill_s)


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


@dataclass
class AcceptWaits:
    """A standing queue of calls waiting for the balancer to take them (CoDel's rule, Nichols and
    Jacobson, "Controlling Queue Delay", 2012: a queue is bad when even its shortest sojourn over an
    interval stays above the target). Each call's wait before its handler started
    (``hetflow.runtime.accept_wait``) is added as it arrives; while the shortest of the last
    ``interval_s``'s waits, over at least ``min_calls`` calls, exceeds ``target_s``, ``standing_s`` is
    that shortest wait, and new calls are refused at once. Refusing costs the loop far less than a call
    it takes, so the queue drains, and the calls that come through quickly again end the refusals: a
    burst passes, a lasting overload is answered in milliseconds rather than after the queue. Time
    passed in (seconds, any monotonic clock); ``target_s`` 0: never."""

    target_s: float = 0.0
    interval_s: float = 0.1
    min_calls: int = 8
    waits: deque[tuple[float, float]] = field(default_factory=deque)
    """(arrival, wait) of the calls within the last ``interval_s``."""

    def add(self, now_s: float, wait_s: float | None) -> float:
        """Record a call's wait (None: not known, nothing recorded) and return the standing wait now
        (0: none)."""
        if not self.target_s:
            return 0.0
        if wait_s is not None:
            self.waits.append((now_s, wait_s))
        while self.waits and self.waits[0][0] < now_s - self.interval_s:
            self.waits.popleft()
        if len(self.waits) < self.min_calls:
            return 0.0
        shortest_s = min(w for _, w in self.waits)
        return shortest_s if shortest_s > self.target_s else 0.0
