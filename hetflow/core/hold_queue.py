"""Calls held in the balancer for KV room (Kairos 6: "if none of the instances are available, the
request remains in the scheduling queue, awaiting the next scheduling round"), in one queue ordered by
the priority rule's key, then by when each was first held.

Each round (a slot later) the held calls try again in that order, and every one that fits goes: a
better-placed call always gets room before a worse-placed one, and a call that does not fit blocks
no other. The balancer's dispatcher and the simulator hold calls with this same queue.

Aging, as Chimera 3.7 ages the engine's queue: a call held for ``starvation_s`` or longer is promoted
ahead of every call held for less, the longest held first, so a long program's first call (a large
priority key under STJF) is tried before the shorter programs that keep arriving behind it (issue 35,
program order).
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


STARVATION_S = 30.0
"""How long a call is held before it is promoted: 60 rounds of the default 0.5 s slot."""


class HoldQueue:
    def __init__(self, starvation_s: float = STARVATION_S) -> None:
        if not starvation_s > 0:
            raise ValueError(f"starvation_s must be > 0, got {starvation_s}")
        self.starvation_s = starvation_s
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

    def in_order(self, now_s: float) -> list[HeldCall]:
        """The held calls in the order a round at ``now_s`` tries them: the promoted ones (held for
        ``starvation_s`` or longer) by when they were first held, then the rest by priority."""
        promoted_before_s = now_s - self.starvation_s

        def order(held: HeldCall) -> tuple[object, ...]:
            if held.held_since_s <= promoted_before_s:
                return (0, held.held_since_s, held.seq)
            return (1, held.priority, held.held_since_s, held.seq)

        return sorted(self._held.values(), key=order)
