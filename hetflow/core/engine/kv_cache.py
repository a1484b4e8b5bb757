"""Paged KV cache accounting: a pool of fixed-size blocks, allocated per request as it grows."""

from __future__ import annotations


def blocks_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


class KVBlockPool:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError("num_blocks and block_size must be >= 1")
        self.num_blocks, self.block_size = num_blocks, block_size
        self._held: dict[str, int] = {}
        self._used = 0

    @property
    def free_blocks(self) -> int:
        return self.num_blocks - self._used

    @property
    def used_blocks(self) -> int:
        return self._used

    @property
    def usage(self) -> float:
        return self._used / self.num_blocks

    def held(self, request_id: str) -> int:
        return self._held.get(request_id, 0)

    def extra_blocks_for(self, request_id: str, tokens: int) -> int:
        """Blocks ``request_id`` still needs to hold ``tokens`` tokens of KV."""
        return max(0, blocks_for(tokens, self.block_size) - self.held(request_id))

    def try_grow(self, request_id: str, tokens: int) -> bool:
        """Hold enough blocks for ``tokens`` tokens; False (and nothing held) if they are not free."""
        extra = self.extra_blocks_for(request_id, tokens)
        if extra > self.free_blocks:
            return False
        if extra:
            self._held[request_id] = self.held(request_id) + extra
            self._used += extra
        return True

    def free(self, request_id: str) -> int:
        released = self._held.pop(request_id, 0)
        self._used -= released
        return released
