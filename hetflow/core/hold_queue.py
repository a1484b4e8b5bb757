"""Calls held in the balancer for KV room (Kairos 6: "if none of the instances are available, the
request remains in the scheduling queue, awaiting the next scheduling round"), in one queue ordered by
the priority rule's key, then by when each was first held.

Each round (a slot later) the held calls try again in that order, and every one that fits goes: among
the held calls a better-placed one always gets room before a worse-placed one, and a call that does not
fit blocks no other. A call that arrives between rounds is decided at once, before the held ones, and
may take room that frees meanwhile: a held call keeps its first key and is not aged (live, the
balancer's ``max_hold_s`` bounds its wait). The balancer's dispatcher and the simulator hold calls with
this same queue.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from hetflow.core.policies.contracts import Priority


@dataclass(order=True, frozen=True)
class HeldCall:
    priority: Priority
    held_since_s: float
    seq: int
    request_id: str = field(compare=False)


class HoldQueue:
    def __init__(self) -> None:
        self._held: dict[str, HeldCall] = {}
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._held

    def hold(self, request_id: str, priority: Priority, now_s: float) -> HeldCall:
        """Hold a call; a call held again keeps its place and the time it was first held."""
        held = self._held.get(request_id)
        if held is None:
            held = self._held[request_id] = HeldCall(priority, now_s, next(self._seq), request_id)
        return held

    def waiting_with(self, request_id: str) -> int:
        """Calls waiting for a decision while ``request_id`` is decided: the held ones, and it if it is
        not held (a new call); ``PolicyStore.waiting_calls``."""
        return len(self._held) + (request_id not in self._held)

    def held_since_s(self, request_id: str) -> float | None:
        """When the call was first held; None when it is not held."""
        held = self._held.get(request_id)
        return held.held_since_s if held is not None else None

    def release(self, request_id: str) -> HeldCall | None:
        return self._held.pop(request_id, None)

    def in_order(self) -> list[HeldCall]:
        """The held calls in the order a round tries them."""
        return sorted(self._held.values())
