"""Kairos's memory ledger (6): an engine's expected KV-cache use over the coming time, in slots.

A request's KV use is modelled as linear in time (Kairos eq. 1): its prompt's tokens when it starts,
growing at the profiled decode speed until its expected end, which is its agent's most likely
execution time (eq. 2). An engine's expected use is the sum over its requests (eq. 3), kept per
0.5 s slot. A request that finishes early takes its remaining slots back at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SLOT_S = 0.5
"""Kairos's slot length: finer slots cost more per decision for little gain (6, step 1)."""


@dataclass(frozen=True)
class MemoryPlan:
    prompt_tokens: int
    decode_tokens_per_s: float
    expected_s: float

    def slot_tokens(self, slot_s: float = SLOT_S) -> np.ndarray:
        """m_r at the end of each slot the request spans: prompt + speed x time, capped at its expected end
        (eq. 1 with eq. 2's expected duration)."""
        slots = max(1, math.ceil(self.expected_s / slot_s))
        elapsed_s = np.minimum(np.arange(1, slots + 1) * slot_s, self.expected_s)
        return self.prompt_tokens + self.decode_tokens_per_s * elapsed_s


class MemoryLedger:
    """One engine's expected KV tokens per slot from the current one on (eq. 3), as a sliding array of
    ``horizon_slots`` slots; a plan longer than the horizon is cut there."""

    def __init__(self, slot_s: float = SLOT_S, horizon_slots: int = 2400) -> None:
        self.slot_s = slot_s
        self._tokens = np.zeros(horizon_slots)
        self._origin = 0
        """Absolute slot index of ``_tokens[0]``; slot k covers [k, k+1) x slot_s."""
        self._entries: dict[str, tuple[int, np.ndarray]] = {}

    def slot_of(self, t_s: float) -> int:
        return math.floor(t_s / self.slot_s)

    def add(self, request_id: str, plan: MemoryPlan, now_s: float) -> None:
        current = self._advance(now_s)
        tokens = plan.slot_tokens(self.slot_s)[:len(self._tokens)]
        self._entries[request_id] = (current, tokens)
        self._tokens[:len(tokens)] += tokens

    def remove(self, request_id: str, now_s: float) -> None:
        """The request is gone: its slots from now on are free again (past slots are history)."""
        entry = self._entries.pop(request_id, None)
        if entry is None:
            return
        current = self._advance(now_s)
        first, tokens = entry
        left = tokens[current - first:]
        if len(left):
            span = self._tokens[:len(left)]
            np.maximum(span - left, 0.0, out=span)  # no float drift below zero

    def fits(self, plan: MemoryPlan, now_s: float, capacity_tokens: float) -> bool:
        """Whether ``plan`` added now keeps every slot it spans within ``capacity_tokens``: the memory
        packer's test (Kairos 6), on the ledger as it is now."""
        mine = plan.slot_tokens(self.slot_s)[:len(self._tokens)]
        return bool((self.window(now_s, len(mine)) + mine).max() <= capacity_tokens)

    def window(self, now_s: float, slots: int) -> np.ndarray:
        """Expected tokens in the ``slots`` slots from the current one on."""
        self._advance(now_s)
        return self._tokens[:slots].copy()

    def occupied_window(self, now_s: float, slots: int) -> np.ndarray:
        """``window`` up to its last occupied slot: what a snapshot carries (nothing for an engine no
        packing decision has used, so other policies' snapshots do not grow)."""
        self._advance(now_s)
        occupied = np.flatnonzero(self._tokens[:slots])  # as np.trim_zeros(..., "b"), at a third of its cost
        return self._tokens[:occupied[-1] + 1].copy() if occupied.size else np.zeros(0)

    def _advance(self, now_s: float) -> int:
        current = max(self.slot_of(now_s), self._origin)   # a clock stepped back does not move the ledger back
        shift = current - self._origin
        if shift > 0:
            if shift >= len(self._tokens):
                self._tokens[:] = 0.0
            else:
                self._tokens[:-shift] = self._tokens[shift:]
                self._tokens[-shift:] = 0.0
            self._origin = current
            self._extend_overdue(current)
        return current

    def _extend_overdue(self, current: int) -> None:
        """A call still in flight past its planned end holds its final size for another span as long as
        its plan (Kairos 6: requests slower than anticipated keep their memory)."""
        for request_id, (first, tokens) in list(self._entries.items()):
            if first + len(tokens) <= current:
                extended = np.full(min(len(tokens), len(self._tokens)), tokens[-1])
                self._tokens[:len(extended)] += extended
                self._entries[request_id] = (current, extended)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._entries
