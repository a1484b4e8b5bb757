"""Tables kept to the keys heard from most recently: what the monitor learns per agent or per workflow,
which clients that name an agent by its instructions, or one per thread, would otherwise grow without end."""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, TypeVar

K = TypeVar("K")
V = TypeVar("V")

MAX_AGENTS = 8192
"""Agents, or (workflow, agent) pairs, whose statistics are kept (agents named by their instructions, or
one per thread, are many)."""


def recent_entry(table: OrderedDict[K, V], key: K, make: Callable[[], V], max_keys: int,
                 forget: Callable[[K], object] = lambda key: None) -> V:
    """``table[key]``, made by ``make`` when missing, as the most recently heard from; past ``max_keys`` the
    least recent keys are dropped, ``forget`` told of each."""
    entry = table.get(key)
    if entry is None:
        entry = table[key] = make()
        while len(table) > max_keys:
            forget(table.popitem(last=False)[0])
    table.move_to_end(key)
    return entry
