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

    def enter(self, loop_lag_s: float, relays: bool = True) -> bool:
        """Count a call in, or refuse it with when to try again. ``relays``: the balancer streams the
        call's tokens (False: it only decides it). True when the call spent burst allowance (``leave``
        gives it back if the call is refused after all)."""
        if self.max_calls and self.calls >= self.max_calls:
            raise ResourceExhausted(f"the balancer holds {self.calls} calls; its limit is {self.max_calls}",
                                    retry_after_s=self.retry_after_s)
        spent_burst = bool(self.max_loop_lag_s) and loop_lag_s > self.max_loop_lag_s
        if spent_burst:
            if relays or self.burst_allowance < 1.0:
                raise ResourceExhausted(f"the balancer is overloaded (its event loop runs {loop_lag_s * 1e3:.1f} ms "
                                        f"late; the limit is {self.max_loop_lag_s * 1e3:.1f} ms)",
                                        retry_after_s=self.retry_after_s)
            self.burst_allowance -= 1.0  # a decide-only call taken on a late loop
        self.calls += 1
        return spent_burst

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
