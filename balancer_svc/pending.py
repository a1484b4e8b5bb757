"""This balancer's own admits that a monitor snapshot may not include yet.

Several calls decide concurrently; each reads a snapshot taken before the others' admits reached
the monitor, so without this overlay a burst of calls all sees the same idle engine. An entry is
added at the instant of the decision, acknowledged with the monitor's ``admit_seq``, and counted
on top of any snapshot whose ``admit_seq`` is older. Across balancers the window that remains is one
monitor round trip.

Acknowledgements arrive in ``admit_seq`` order (the monitor applies admits one at a time and answers
on one connection), so acknowledged entries sit in a deque by sequence and ``apply`` reads only the
tail newer than the snapshot: O(unacknowledged + newer) per call, not O(all recent admits).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Sequence, cast

import numpy as np

from hetflow.core.monitor.memory_ledger import MemoryPlan
from hetflow.core.snapshot import ClusterSnapshot, EngineView, InFlightCall, snapshot_with, view_with

REORDER_SLACK = 64  # how far out of sequence order an acknowledgement may be processed


@dataclass
class PendingAdmit:
    engine_id: str
    predicted_tokens: float
    predicted_cost_s: float = 0.0
    memory_plan: MemoryPlan | None = None
    admit_seq: int | None = None
    """None until the monitor acknowledged the admit."""
    acked_at_s: float = 0.0
    prompt_tokens: int = 0
    admitted_unix_s: float = 0.0
    """When this balancer decided it (the monitor stamps its own entry on arrival)."""
    in_flight_call: InFlightCall = field(init=False)
    """The call as an engine's view lists it: made once, read by every decision until it is counted."""

    def __post_init__(self) -> None:
        self.in_flight_call = InFlightCall(self.prompt_tokens, self.predicted_tokens, self.admitted_unix_s)


class PendingAdmits:
    def __init__(self, horizon_s: float) -> None:
        self._entries: dict[str, PendingAdmit] = {}
        self._unacked: dict[str, PendingAdmit] = {}
        """The entries the monitor has not acknowledged: counted on top of every snapshot."""
        self._acked: collections.deque[tuple[int, str]] = collections.deque()
        self._horizon_s = horizon_s
        """Acknowledged entries older than this are in every snapshot a live decision can hold."""

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, request_id: str, engine_id: str, predicted_tokens: float, predicted_cost_s: float = 0.0,
            memory_plan: MemoryPlan | None = None, prompt_tokens: int = 0, admitted_unix_s: float = 0.0) -> None:
        entry = PendingAdmit(engine_id, predicted_tokens, predicted_cost_s, memory_plan,
                             prompt_tokens=prompt_tokens, admitted_unix_s=admitted_unix_s)
        self._entries[request_id] = self._unacked[request_id] = entry

    def acked(self, request_id: str, admit_seq: int, now_s: float) -> None:
        entry = self._entries.get(request_id)
        if entry is not None:
            entry.admit_seq, entry.acked_at_s = admit_seq, now_s
            self._acked.append((admit_seq, request_id))
            self._unacked.pop(request_id, None)

    def forget_acks(self) -> None:
        """The monitor restarted: its ``admit_seq`` counts from zero again and holds none of these calls
        until they are registered again, so every entry counts on top until acknowledged anew."""
        for entry in self._entries.values():
            entry.admit_seq = None
        self._acked.clear()
        self._unacked = dict(self._entries)

    def drop(self, request_id: str) -> None:
        self._entries.pop(request_id, None)
        self._unacked.pop(request_id, None)

    def apply(self, snapshot: ClusterSnapshot, snapshot_admit_seq: int, now_s: float) -> ClusterSnapshot:
        """``snapshot`` with the load of entries it cannot contain added to their engines."""
        self._prune(now_s)
        missing: dict[str, list[PendingAdmit]] = {}
        entry: PendingAdmit | None
        for entry in self._unacked.values():
            missing.setdefault(entry.engine_id, []).append(entry)
        for seq, request_id in reversed(self._acked):
            if seq <= snapshot_admit_seq - REORDER_SLACK:
                break
            entry = self._entries.get(request_id)
            if seq > snapshot_admit_seq and entry is not None and entry.admit_seq == seq:
                missing.setdefault(entry.engine_id, []).append(entry)
        if not missing:
            return snapshot
        engines = tuple(_with_admits(e, missing[e.engine_id]) if e.engine_id in missing else e
                        for e in snapshot.engines)
        return snapshot_with(snapshot, engines=engines)

    def _prune(self, now_s: float) -> None:
        while self._acked:
            _, request_id = self._acked[0]
            entry = self._entries.get(request_id)
            if entry is not None and entry.admit_seq is not None and now_s - entry.acked_at_s <= self._horizon_s:
                return
            self._acked.popleft()
            if entry is not None and entry.admit_seq is not None:
                del self._entries[request_id]


def _with_admits(view: EngineView, admits: list[PendingAdmit]) -> EngineView:
    """The engine's view with ``admits`` counted in: their tokens, costs, memory plans and calls (merged
    by admit time, so the calls stay oldest first; sorted only where they are not so already)."""
    calls = (*view.in_flight_calls, *(a.in_flight_call for a in admits))
    first_added = max(len(view.in_flight_calls), 1)
    if any(calls[i].admitted_s < calls[i - 1].admitted_s for i in range(first_added, len(calls))):
        calls = tuple(sorted(calls, key=lambda c: c.admitted_s))
    return view_with(view, in_flight_tokens=view.in_flight_tokens + sum(a.predicted_tokens for a in admits),
                   in_flight_requests=view.in_flight_requests + len(admits),
                   in_flight_cost_s=view.in_flight_cost_s + sum(a.predicted_cost_s for a in admits),
                   kv_ledger_tokens=_with_plans(view.kv_ledger_tokens,
                                                [a.memory_plan for a in admits if a.memory_plan is not None]),
                   in_flight_calls=calls)


def _with_plans(ledger: Sequence[float], plans: list[MemoryPlan]) -> Sequence[float]:
    """The engine's ledger with this balancer's unacknowledged calls added from the current slot on."""
    if not plans:
        return ledger
    slots = np.array(ledger, dtype=float)
    for plan in plans:
        tokens = plan.slot_tokens()[:len(slots)]
        slots[:len(tokens)] += tokens
    return cast(Sequence[float], slots)
