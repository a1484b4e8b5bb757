"""Paged KV cache accounting: a pool of fixed-size blocks, allocated per request as it grows, with
automatic prefix caching as vLLM's v1 block pool does it.

With prefix caching, a request's full prompt blocks are identified by chained hashes (each block's
hash covers its tokens and the hash of the block before it, so equal hashes mean equal prefixes).
When a request is admitted, the longest run of its leading block hashes found in the cache is reused
and those tokens skip prefill. At most ``prompt - 1`` tokens are reused, because one token must run to
produce logits. A computed full block is registered under its hash. A freed block keeps its content
while no request holds it: it stays findable until a new allocation evicts it, least recently freed
first. A request's blocks are freed tail first, so its last block is evicted before its first
(``vllm/v1/core/block_pool.py``: ``free_blocks``, ``get_new_blocks``; ``kv_cache_manager.py``:
``get_computed_blocks``).

A finished request's cached blocks can be *retained* under a holder name instead of freed (a paused
program's KV kept across its tool call: Continuum, arXiv 2511.02230, pins it for a TTL): retained
blocks count as used, so no allocation evicts them, and the program's next call finds them with
``acquire_prefix`` as it would any cached block. ``free(holder)`` lets them go.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence


def blocks_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


def growth_blocks_left(prompt_tokens: int, reserve_output_tokens: int, held_blocks: int, block_size: int) -> int:
    """Blocks a request with a growth reserve (issue 35) may still take beyond the ``held_blocks`` it has:
    up to its whole prompt and reserved output; 0 without a reserve."""
    if not reserve_output_tokens:
        return 0
    return max(0, blocks_for(prompt_tokens + reserve_output_tokens, block_size) - held_blocks)


class KVBlockPool:
    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool = False) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError("num_blocks and block_size must be >= 1")
        self.num_blocks, self.block_size, self.prefix_caching = num_blocks, block_size, prefix_caching
        self._blocks: dict[str, list[int | None]] = {}
        """Each request's blocks in order: the hash a block is cached under, or None."""
        self._holders: dict[int, int] = {}
        """Cached blocks some request holds: hash -> how many requests hold it."""
        self._evictable: OrderedDict[int, None] = OrderedDict()
        """Cached blocks no request holds, least recently freed first."""
        self._used = 0
        """Blocks some request holds (a cached block held by several requests counts once)."""
        self._registered: dict[str, int] = {}
        """Per request, how many of its leading blocks ``register_full_blocks`` has already been through."""

    @property
    def free_blocks(self) -> int:
        """Blocks an allocation can have: never used, or cached but held by no request."""
        return self.num_blocks - self._used

    @property
    def used_blocks(self) -> int:
        return self._used

    @property
    def usage(self) -> float:
        return self._used / self.num_blocks

    @property
    def cached_blocks(self) -> int:
        return len(self._holders) + len(self._evictable)

    def held(self, request_id: str) -> int:
        return len(self._blocks.get(request_id, ()))

    def extra_blocks_for(self, request_id: str, tokens: int) -> int:
        """Blocks ``request_id`` still needs to hold ``tokens`` tokens of KV."""
        return max(0, blocks_for(tokens, self.block_size) - self.held(request_id))

    def try_grow(self, request_id: str, tokens: int) -> bool:
        """Hold enough blocks for ``tokens`` tokens; False (and nothing held) if they are not free."""
        held = self._blocks.get(request_id)
        if held is not None and tokens <= len(held) * self.block_size:
            return True  # the blocks are held already: most decode iterations
        extra = self.extra_blocks_for(request_id, tokens)
        if extra > self.free_blocks:
            return False
        blocks = self._blocks.setdefault(request_id, [])
        for _ in range(extra):
            if self.num_blocks - self._used - len(self._evictable) <= 0:
                self._evictable.popitem(last=False)  # no never-used block left: evict the least recent
            blocks.append(None)
            self._used += 1
        return True

    def acquire_prefix(self, request_id: str, block_hashes: Sequence[int], max_tokens: int) -> int:
        """Reuse the longest run of the request's leading blocks found in the cache, up to ``max_tokens``
        tokens; returns the tokens reused. Called before the request holds any block."""
        if not self.prefix_caching or self.held(request_id):
            return 0
        blocks = self._blocks.setdefault(request_id, [])
        holders, evictable = self._holders, self._evictable
        for block_hash in block_hashes[:max(0, max_tokens) // self.block_size]:
            if block_hash in holders:
                holders[block_hash] += 1
            elif block_hash in evictable:
                del evictable[block_hash]
                holders[block_hash] = 1
                self._used += 1
            else:
                break
            blocks.append(block_hash)
        return len(blocks) * self.block_size

    def register_full_blocks(self, request_id: str, block_hashes: Sequence[int], computed_tokens: int) -> None:
        """Cache the request's blocks that ``computed_tokens`` filled, under their hashes (a hash already
        cached keeps the block that has it; this one stays private)."""
        registered = self._registered.get(request_id, 0)
        if not self.prefix_caching or computed_tokens // self.block_size <= registered:
            return  # no block filled since the last call: most decode iterations
        blocks = self._blocks.get(request_id, [])
        end = min(computed_tokens // self.block_size, len(block_hashes), len(blocks))
        for i in range(registered, end):
            block_hash = block_hashes[i]
            if blocks[i] is None and block_hash not in self._holders and block_hash not in self._evictable:
                blocks[i] = block_hash
                self._holders[block_hash] = 1
        self._registered[request_id] = max(end, registered)

    def retain(self, request_id: str, holder: str, block_hashes: Sequence[int]) -> int:
        """Hold the finished request's leading run of cached blocks under ``holder`` and free the rest of
        its blocks; what ``holder`` retained before is freed after (the new run shares it). A private
        block whose hash another block is cached under is retained as that one (it is what a later
        prefix match finds); the run ends at the first block with no cached hash, since a prefix match
        stops there. Returns the blocks retained."""
        holders, evictable = self._holders, self._evictable
        run: list[int | None] = []
        for i, block_hash in enumerate(self._blocks.get(request_id, ())):
            if block_hash is None:
                block_hash = block_hashes[i] if i < len(block_hashes) else None
                if block_hash is None or (block_hash not in holders and block_hash not in evictable):
                    break
            if block_hash in evictable:
                del evictable[block_hash]
                holders[block_hash] = 1
                self._used += 1
            else:
                holders[block_hash] += 1
            run.append(block_hash)
        previous = self._blocks.pop(holder, None)
        self.free(request_id)
        self._blocks[holder] = run
        if previous is not None:
            self._release(previous)
        return len(run)

    def free(self, request_id: str) -> int:
        """Release the request's (or a retaining holder's) blocks, tail first; cached ones stay findable
        until evicted."""
        blocks = self._blocks.pop(request_id, [])
        self._registered.pop(request_id, None)
        self._release(blocks)
        return len(blocks)

    def _release(self, blocks: list[int | None]) -> None:
        holders, evictable, released = self._holders, self._evictable, 0
        for block_hash in reversed(blocks):
            if block_hash is None:
                released += 1
                continue
            holding = holders[block_hash] - 1
            if holding:
                holders[block_hash] = holding
            else:
                del holders[block_hash]
                released += 1
                evictable[block_hash] = None
        self._used -= released
