"""When a vLLM engine has room for hetflow's next request: the rule both vLLM backends admit by.

hetflow keeps waiting requests in its own aging queue (Chimera 3.7) and hands vLLM the head only when
vLLM could schedule it now: fewer running than ``max_num_seqs`` and free KV blocks for the prompt plus
one token and a watermark, as vLLM's own scheduler checks before it admits (``KVCacheManager.allocate_slots``,
``watermark``). So vLLM's waiting queue stays (nearly) empty and the order work starts in is hetflow's.

Where the engine caches prefixes, blocks the requests share count once, as vLLM's prefix cache holds
them (the agent family's calls share a system prompt; its twin's engine, ``KvCache``, counts them so): a
running request's full prompt blocks another running request holds, and the head's that running
requests hold, take no more room. The requests carry their prompts' chained block hashes
(``EngineRequest.block_hashes``, none without prefix caching) and the backend keeps the running ones' in a
``SharedPromptBlocks`` as they start and end; without them every block counts.

With room reserved for decode growth (issue 35), the free blocks must also cover what hetflow's running
requests may yet take up to their reserved output, and the head's own such growth, as the engine model
admits (``BatchScheduler``); a head with nothing running beside it needs only its prompt.
"""

from __future__ import annotations

from typing import Iterable

from hetflow.core.engine.kv_cache import blocks_for, growth_blocks_left
from hetflow.core.engine.request import EngineRequest
from hetflow.core.errors import ResourceExhausted
from hetflow.core.prefix import leading_matches

KV_WATERMARK = 0.01
"""Share of blocks kept free at admission, as vLLM's own watermark."""


class SharedPromptBlocks:
    """The running requests' full prompt blocks, by chained hash: how many of their blocks are another's
    too (``duplicate_blocks``), and how much of a prompt's beginning they hold (``held_prefix``), kept as
    requests start (``add``) and end (``remove``) so an admission check costs no pass over their prompts."""

    def __init__(self) -> None:
        self._holders: dict[int, int] = {}
        self.duplicate_blocks = 0

    def add(self, req: EngineRequest) -> None:
        for block_hash in req.block_hashes:
            holders = self._holders.get(block_hash, 0)
            self.duplicate_blocks += holders > 0
            self._holders[block_hash] = holders + 1

    def remove(self, req: EngineRequest) -> None:
        for block_hash in req.block_hashes:
            holders = self._holders.pop(block_hash, 0)
            if holders > 1:
                self._holders[block_hash] = holders - 1
                self.duplicate_blocks -= 1

    def held_prefix(self, req: EngineRequest) -> int:
        """``req``'s leading full blocks a running request holds (chained: past the first miss, none is)."""
        return leading_matches(req.block_hashes, self._holders)


def admissible_when_idle(prompt_tokens: int, num_blocks: int, block_size: int) -> bool:
    """Whether ``has_room`` would ever take a prompt this long: on an idle engine it still needs the
    prompt's blocks and the watermark. A call past it would wait at the queue's head for good, and every
    call behind it too."""
    return blocks_for(prompt_tokens + 1, block_size) + int(KV_WATERMARK * num_blocks) <= num_blocks


def check_admissible(prompt_tokens: int, max_tokens: int, num_blocks: int, block_size: int) -> None:
    """A call this engine can never run is refused before it queues (``ResourceExhausted`` without a retry
    hint): its prompt and output past the KV, or its prompt past what admission ever takes."""
    capacity = num_blocks * block_size
    if prompt_tokens + max_tokens > capacity:
        raise ResourceExhausted(f"request needs {prompt_tokens + max_tokens} KV tokens; engine holds {capacity}")
    if not admissible_when_idle(prompt_tokens, num_blocks, block_size):
        raise ResourceExhausted(f"prompt {prompt_tokens} tokens leaves no room for the KV watermark "
                                f"({KV_WATERMARK:.0%} of {num_blocks} blocks of {block_size})")


def has_room(head: EngineRequest, running: Iterable[EngineRequest], max_num_seqs: int, kv_usage: float,
             num_blocks: int, block_size: int, retained_tokens: int = 0,
             shared: SharedPromptBlocks | None = None) -> bool:
    """``kv_usage`` is vLLM's own report (0..1); the blocks hetflow's running requests need count when
    they are more (the report lags the requests just admitted). ``retained_tokens``: paused programs'
    contexts held for their next calls (``FrontQueue.retained_tokens``), which vLLM counts as free: other
    programs' only, since the head's own context is the prefix its prompt's blocks count. ``shared``: the
    running requests' prompt blocks, each shared one counted once (None: every block counts)."""
    running = list(running)
    if len(running) >= max_num_seqs:
        return False
    ours = sum(blocks_for(r.prompt_tokens + r.output_tokens + 1, block_size) for r in running)
    if shared is not None:
        ours -= shared.duplicate_blocks
    used = max(ours, int(kv_usage * num_blocks)) + blocks_for(retained_tokens, block_size)
    needed = (blocks_for(head.prompt_tokens + 1, block_size) - (shared.held_prefix(head) if shared else 0)
              + int(KV_WATERMARK * num_blocks))
    if head.reserve_output_tokens and running:
        needed += sum(growth_blocks_left(r.prompt_tokens, r.reserve_output_tokens,
                                         blocks_for(r.prompt_tokens + r.output_tokens + 1, block_size), block_size)
                      for r in [*running, head])
    return num_blocks - used >= needed
