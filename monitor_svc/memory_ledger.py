"""Kairos's memory ledger (6): an engine's expected KV-cache use over the coming time, in slots.

A request's KV use is modelled as linear in time (Kairos eq. 1): its prompt's tokens when it starts,
growing at the profiled decode speed until its expected end, which is its agent's most likely
execution time (eq. 2). An engine's expected use is the sum over its requests (eq. 3), kept per
0.5 s slot. A request that finishes early takes its remaining slots back at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

SLOT_S = 0.5
"""Kairos's slot length: finer slots cost more per decision for little gain (6, step 1)."""


@dataclass(frozen=True)
class MemoryPlan:
    prompt_tokens: int
    decode_tokens_per_s: float
    expected_s: float

    def slot_tokens(self, slot_s: float = SLOT_S) -> list[float]:
        """m_r at the end of each slot the request spans: prompt + speed x time, capped at its expected end
        (eq. 1 with eq. 2's expected duration)."""
        slots = max(1, math.ceil(self.expected_s / slot_s))
        return [self.prompt_tokens + self.decode_tokens_per_s * min((k + 1) * slot_s, self.expected_s)
                for k in range(slots)]


class MemoryLedger:
    """One engine's expected KV tokens per absolute slot (slot k covers [k, k+1) x slot_s)."""

    def __init__(self, slot_s: float = SLOT_S) -> None:
        self.slot_s = slot_s
        self._slots: dict[int, float] = {}
        self._entries: dict[str, tuple[int, list[float]]] = {}

    def slot_of(self, t_s: float) -> int:
        return math.floor(t_s / self.slot_s)

    def add(self, request_id: str, plan: MemoryPlan, now_s: float) -> None:
        first, tokens = self.slot_of(now_s), plan.slot_tokens(self.slot_s)
        self._entries[request_id] = (first, tokens)
        for k, m in enumerate(tokens):
            self._slots[first + k] = self._slots.get(first + k, 0.0) + m

    def remove(self, request_id: str, now_s: float) -> None:
        """The request is gone: its slots from now on are free again (past slots are history)."""
        entry = self._entries.pop(request_id, None)
        if entry is None:
            return
        first, tokens = entry
        current = self.slot_of(now_s)
        for k, m in enumerate(tokens):
            slot = first + k
            if slot >= current and slot in self._slots:
                left = self._slots[slot] - m
                if left > 1e-6:
                    self._slots[slot] = left
                else:
                    del self._slots[slot]
        self._prune(current)

    def window(self, now_s: float, slots: int) -> list[float]:
        """Expected tokens in the ``slots`` slots from the current one on."""
        current = self.slot_of(now_s)
        self._prune(current)
        return [self._slots.get(current + k, 0.0) for k in range(slots)]

    def _prune(self, current: int) -> None:
        for slot in [s for s in self._slots if s < current]:
            del self._slots[slot]

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._entries
