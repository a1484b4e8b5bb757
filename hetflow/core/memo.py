"""A bounded memo for work repeated across calls: an agent's prompt is its last prompt and answer plus
a little, so what a decision derives from a long prompt (its token count, its block hashes) is mostly
derived from text it has seen before. Keys are small (lengths and hashes, not the texts), so a memo's
size is set by its entry count and its values, not by the prompts' length."""

from __future__ import annotations

from typing import Callable, Generic, Hashable, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedMemo(Generic[K, V]):
    """Values by key, at most ``max_entries`` of them, the oldest entry out first. Callers on several
    threads are safe (each step is one dictionary operation under the GIL): at worst a value is computed
    twice, or one entry too many is evicted."""

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
                for oldest in self._values:  # the first key is the oldest
                    self._values.pop(oldest, None)
                    break
            return value
