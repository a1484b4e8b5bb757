"""The room a decision assumed, carried with its admit so the monitor can check it against every
balancer's admits: a balancer decides on a snapshot that does not yet hold the calls other balancers
admitted since, so two of them can both see the last room on an engine. The monitor admits a call only
while the room its decision assumed is still there, and answers ABORTED otherwise (the balancer then
holds the call and decides it again).

Two rooms are checked: the memory packer's (a call's memory plan within the engine's KV ledger in every
slot, Kairos 6: ``MemoryLedger.fits``) and the working-set gate's (a new program's context and output
within what the engine's active programs leave of its KV: ``WorkingSetRoom``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorkingSetRoom:
    """A new program's room under the working-set gate (``filters/working_set.py``)."""

    need_tokens: float
    """The call's prompt and predicted output."""
    limit_tokens: float
    """The share of the engine's KV the working sets may fill (``kv_fraction`` of its capacity)."""
    growth_share: float
    """How much of the active programs' growth to come counts (``growth_share``)."""

    def fits(self, resident_tokens: float, resident_growth_tokens: float) -> bool:
        """Whether the engine's active programs leave the room: an engine no active program holds always
        does, so a program larger than the limit still starts somewhere."""
        return not resident_tokens or self.over_tokens(resident_tokens, resident_growth_tokens) <= 0

    def over_tokens(self, resident_tokens: float, resident_growth_tokens: float) -> float:
        """How far the active programs' working sets and the call's need go past the limit (<= 0: within)."""
        working_set_tokens = resident_tokens + self.growth_share * resident_growth_tokens
        return working_set_tokens + self.need_tokens - self.limit_tokens
