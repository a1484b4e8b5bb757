"""What each engine's prefix cache likely holds: the block hashes of the prompts recently sent to it.

The monitor cannot see an engine's cache, so it approximates it from its own dispatches, as the
Gateway API Inference Extension's prefix-cache scorer does (an LRU of block hashes per server,
updated when a request is routed): every prompt sent to the engine adds its blocks, the least
recently sent are forgotten past the capacity. SGLang's cache-aware router keeps the same
approximation as a radix tree per worker.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Iterable, Sequence

from hetflow.core.prefix import leading_matches


class PrefixIndex:
    def __init__(self, capacity_blocks: int) -> None:
        if capacity_blocks < 1:
            raise ValueError("capacity_blocks must be >= 1")
        self.capacity_blocks = capacity_blocks
        self._blocks: OrderedDict[int, None] = OrderedDict()
        """Block hashes, least recently sent first."""

    def __len__(self) -> int:
        return len(self._blocks)

    def record(self, block_hashes: Iterable[int]) -> None:
        """A prompt with these blocks was sent to the engine: they are now its most recent."""
        for block_hash in block_hashes:
            self._blocks[block_hash] = None
            self._blocks.move_to_end(block_hash)
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)

    def matched_blocks(self, block_hashes: Sequence[int]) -> int:
        """Leading blocks of the prompt the engine was sent recently: the prefix it would likely reuse."""
        return leading_matches(block_hashes, self._blocks)
