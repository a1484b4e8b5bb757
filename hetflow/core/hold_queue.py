"""Calls held in the balancer for KV room (Kairos 6: a request stays in the scheduling queue until
memory allows), in one queue ordered by the priority rule's key, then by when each was first held.

Calls are released in that order: of each model's held calls only the first may try for room, so no
call overtakes a better-placed one of its model, while a model with room is not blocked by another's
queue. The balancer's dispatcher and the simulator hold calls with this same queue.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from hetflow.core.policies import Priority


@dataclass(order=True, frozen=True)
class HeldCall:
    priority: Priority
    held_since_s: float
    seq: int
    request_id: str = field(compare=False)
    model: str = field(compare=False)


class HoldQueue:
    def __init__(self) -> None:
        self._held: dict[str, HeldCall] = {}
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._held

    def hold(self, request_id: str, model: str, priority: Priority, now_s: float) -> HeldCall:
        """Hold a call; a call held again keeps its place and the time it was first held."""
        held = self._held.get(request_id)
        if held is None:
            held = self._held[request_id] = HeldCall(priority, now_s, next(self._seq), request_id, model)
        return held

    def release(self, request_id: str) -> HeldCall | None:
        return self._held.pop(request_id, None)

    def first_of(self, model: str) -> HeldCall | None:
        """The model's best-placed held call: the one whose turn it is to try for room."""
        return min((h for h in self._held.values() if h.model == model), default=None)

    def is_first(self, request_id: str) -> bool:
        held = self._held.get(request_id)
        return held is not None and self.first_of(held.model) is held

    def in_order(self) -> list[HeldCall]:
        return sorted(self._held.values())
