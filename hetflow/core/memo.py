"""A bounded memo for work repeated across calls: an agent's prompt is its last prompt and answer plus
a little, so what a decision derives from a long prompt (its token count, its block hashes) is mostly
derived from text it has seen before. Keys are small (lengths and hashes, not the texts), so a memo
holds a few megabytes whatever the prompts' size."""

from __future__ import annotations

from typing import Callable, Generic, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedMemo(Generic[K, V]):
    """Values by key, at most ``max_entries`` of them, the oldest entry out first. Not thread-safe: one
    event loop (a service) or one simulation owns it."""

    def __init__(self, max_entries: int = 65_536) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be >= 1")
        self.max_entries = max_entries
        self._values: dict[K, V] = {}

    def __len__(self) -> int:
        return len(self._values)

    def get(self, key: K, compute: Callable[[], V]) -> V:
        """The value remembered for ``key``, or ``compute()``'s, remembered."""
        try:
            return self._values[key]
        except KeyError:
            value = self._values[key] = compute()
            if len(self._values) > self.max_entries:
                del self._values[next(iter(self._values))]
            return value
