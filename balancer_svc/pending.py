"""This balancer's own admits that a monitor snapshot may not include yet.

Several calls decide concurrently; each reads a snapshot taken before the others' admits reached
the monitor, so without this overlay a burst of calls all sees the same idle engine. An entry is
added at the instant of the decision, acknowledged with the monitor's ``admit_seq``, and counted
on top of any snapshot whose ``admit_seq`` is older. Across balancers the window that remains is one
monitor round trip.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from balancer_svc.snapshot import ClusterSnapshot


@dataclass
class PendingAdmit:
    engine_id: str
    predicted_tokens: float
    admit_seq: int | None = None
    """None until the monitor acknowledged the admit."""
    acked_at_s: float = 0.0


class PendingAdmits:
    def __init__(self, horizon_s: float) -> None:
        self._entries: dict[str, PendingAdmit] = {}
        self._horizon_s = horizon_s
        """Acknowledged entries older than this are in every snapshot a live decision can hold."""

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, request_id: str, engine_id: str, predicted_tokens: float) -> None:
        self._entries[request_id] = PendingAdmit(engine_id, predicted_tokens)

    def acked(self, request_id: str, admit_seq: int, now_s: float) -> None:
        entry = self._entries.get(request_id)
        if entry is not None:
            entry.admit_seq, entry.acked_at_s = admit_seq, now_s

    def drop(self, request_id: str) -> None:
        self._entries.pop(request_id, None)

    def apply(self, snapshot: ClusterSnapshot, snapshot_admit_seq: int, now_s: float) -> ClusterSnapshot:
        """``snapshot`` with the load of entries it cannot contain added to their engines."""
        extra: dict[str, tuple[float, int]] = {}
        for request_id, entry in list(self._entries.items()):
            if entry.admit_seq is not None and now_s - entry.acked_at_s > self._horizon_s:
                del self._entries[request_id]
                continue
            if entry.admit_seq is None or entry.admit_seq > snapshot_admit_seq:
                tokens, count = extra.get(entry.engine_id, (0.0, 0))
                extra[entry.engine_id] = (tokens + entry.predicted_tokens, count + 1)
        if not extra:
            return snapshot
        engines = tuple(
            replace(e, in_flight_tokens=e.in_flight_tokens + extra[e.engine_id][0],
                    in_flight_requests=e.in_flight_requests + extra[e.engine_id][1])
            if e.engine_id in extra else e for e in snapshot.engines)
        return replace(snapshot, engines=engines)
