"""A prompt's prefix identity: chained hashes of its full blocks.

vLLM's automatic prefix caching identifies a full KV block by a hash over its tokens and the hash of
the block before it, so two prompts share a block's hash exactly when they share everything up to
its end (``vllm/v1/core/kv_cache_utils.py``: ``hash_block_tokens``). The engine model reuses cached
blocks by these hashes, and the balancer's prefix-affinity scoring looks them up in what each engine
was sent recently, as the routers that approximate an engine's cache do (the Gateway API Inference
Extension's prefix-cache scorer hashes fixed-size chunks of the prompt the same way).

Three sources of blocks:
- a simulated prompt is a sequence of ``PromptPart``: pieces of content with an identity and a length
  (a system prompt's digest, an ancestor stage's output), whose tokens the trace does not spell out;
- a live prompt is text, hashed in chunks of ``TEXT_BLOCK_CHARS`` characters;
- a tokenized prompt (the vLLM-compatible simulated server's) is hashed block by block of token ids,
  as vLLM does.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Container, Iterable, Sequence

from hetflow.core.memo import BoundedMemo

TEXT_BLOCK_CHARS = 64
"""Characters per block of a live prompt's text: about 16 tokens, vLLM's default block size (the
Gateway API Inference Extension's prefix-cache plugin hashes 64-character blocks by default)."""


@dataclass(frozen=True)
class PromptPart:
    """A piece of a prompt: ``key`` names its content (equal keys, equal tokens), ``tokens`` its length."""

    key: str
    tokens: int


class BlockHasher:
    """Chained hashes of the full ``block_size``-token blocks of a prompt built part by part; the tail
    that fills no block has none yet. A block's content is the (part, offset) pieces it covers.
    Process-local (Python's ``hash``): the simulator compares them within one run. ``copy`` then
    ``extend`` continues a sequence (a prompt, then its output) without hashing the prompt again."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.hashes: list[int] = []
        self._parent, self._filled = 0, 0
        self._pieces: list[tuple[str, int, int]] = []

    def copy(self) -> BlockHasher:
        other = BlockHasher(self.block_size)
        other.hashes, other._parent = list(self.hashes), self._parent
        other._pieces, other._filled = list(self._pieces), self._filled
        return other

    def extend(self, parts: Iterable[PromptPart]) -> BlockHasher:
        size, hashes = self.block_size, self.hashes
        for part in parts:
            offset = 0
            if self._filled:  # finish the open block first
                take = min(size - self._filled, part.tokens)
                self._pieces.append((part.key, 0, take))
                self._filled, offset = self._filled + take, take
                if self._filled == size:
                    self._close()
            whole_end = offset + (part.tokens - offset) // size * size
            parent = self._parent
            for start in range(offset, whole_end, size):  # blocks inside the part: one piece each
                parent = hash((parent, part.key, start))
                hashes.append(parent)
            self._parent = parent
            if whole_end < part.tokens:
                self._pieces, self._filled = [(part.key, whole_end, part.tokens - whole_end)], part.tokens - whole_end
        return self

    def _close(self) -> None:
        self._parent = hash((self._parent, *self._pieces))
        self.hashes.append(self._parent)
        self._pieces, self._filled = [], 0


SEGMENT_BLOCKS = 32
"""Text blocks hashed and remembered together (``text_block_hashes``)."""

_SEGMENTS: BoundedMemo[tuple[bytes, int, int, int], tuple[tuple[int, ...], bytes]] = BoundedMemo(8192)
"""Each segment's block hashes and last chained digest, by (the digest before it, block size, the
segment's length and Python hash): a segment whose text and whole prefix match one seen before. An
entry takes about 1.7 KB, so the memo about 14 MB, covering the last 16 MB of distinct prompt text."""


def text_block_hashes(text: str, block_chars: int = TEXT_BLOCK_CHARS,
                      memo: BoundedMemo[tuple[bytes, int, int, int], tuple[tuple[int, ...], bytes]] = _SEGMENTS
                      ) -> tuple[int, ...]:
    """Chained hashes of the full ``block_chars``-character blocks of ``text``: stable across
    processes (BLAKE2b, 63 bits), so balancers and the monitor agree on them. Hashed ``SEGMENT_BLOCKS``
    blocks at a time, each segment remembered under the digest it chains on (``hetflow.core.memo``):
    an agent's prompt repeats its last one, whose segments are then looked up, not hashed again."""
    hashes: list[int] = []
    parent = b""
    whole = len(text) // block_chars * block_chars
    step = block_chars * SEGMENT_BLOCKS
    for start in range(0, whole, step):
        segment = text[start:min(start + step, whole)]
        segment_hashes, parent = memo.get((parent, block_chars, len(segment), hash(segment)),
                                          functools.partial(chained_block_hashes, parent, segment, block_chars))
        hashes += segment_hashes
    return tuple(hashes)


def chained_block_hashes(parent: bytes, text: str, block_chars: int) -> tuple[tuple[int, ...], bytes]:
    """The hashes of ``text``'s full blocks chained on ``parent`` (the digest of the block before them;
    empty at the start), and the last digest: each block's is BLAKE2b over the one before and its text."""
    hashes = []
    for start in range(0, len(text) // block_chars * block_chars, block_chars):
        chunk = text[start:start + block_chars].encode("utf-8", errors="replace")
        parent = hashlib.blake2b(parent + chunk, digest_size=8).digest()
        hashes.append(int.from_bytes(parent, "big") >> 1)
    return tuple(hashes), parent


def token_block_hashes(token_ids: Sequence[int], block_size: int) -> tuple[int, ...]:
    """Chained hashes of the full ``block_size``-token blocks of a tokenized prompt, each over its token
    ids and the hash before it (``vllm/v1/core/kv_cache_utils.py``: ``hash_block_tokens``).
    Process-local (Python's ``hash``): one engine compares them with its own cache."""
    hashes: list[int] = []
    parent = 0
    for start in range(0, len(token_ids) // block_size * block_size, block_size):
        parent = hash((parent, *token_ids[start:start + block_size]))
        hashes.append(parent)
    return tuple(hashes)


def leading_matches(block_hashes: Sequence[int], known: Container[int]) -> int:
    """How many of the prompt's leading blocks are in ``known``: the prefix an engine holding ``known``
    would reuse (a miss ends the run, since later blocks chain on it)."""
    matched = 0
    for block_hash in block_hashes:
        if block_hash not in known:
            break
        matched += 1
    return matched
