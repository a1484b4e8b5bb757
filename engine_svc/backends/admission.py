"""When a vLLM engine has room for hetflow's next request: the rule both vLLM backends admit by.

hetflow keeps waiting requests in its own aging queue (Chimera 3.7) and hands vLLM the head only when
vLLM could schedule it now: fewer running than ``max_num_seqs`` and free KV blocks for the prompt plus
one token and a watermark, as vLLM's own scheduler checks before it admits (``KVCacheManager.allocate_slots``,
``watermark``). So vLLM's waiting queue stays (nearly) empty and the order work starts in is hetflow's.

Blocks the requests share count once, as vLLM's prefix cache holds them (the agent family's calls share
a system prompt; its twin's engine, ``KvCache``, counts them so): a running request's full prompt blocks
another running request holds, and the head's that running requests hold, take no more room. The
requests carry their prompts' chained block hashes (``EngineRequest.block_hashes``); without them every
block counts.

With room reserved for decode growth (issue 35), the free blocks must also cover what hetflow's running
requests may yet take up to their reserved output, and the head's own such growth, as the engine model
admits (``BatchScheduler``); a head with nothing running beside it needs only its prompt.
"""

from __future__ import annotations

from typing import Iterable

from hetflow.core.engine.kv_cache import blocks_for, growth_blocks_left
from hetflow.core.engine.request import EngineRequest

KV_WATERMARK = 0.01
"""Share of blocks kept free at admission, as vLLM's own watermark."""


def has_room(head: EngineRequest, running: Iterable[EngineRequest], max_num_seqs: int, kv_usage: float,
             num_blocks: int, block_size: int, retained_tokens: int = 0) -> bool:
    """``kv_usage`` is vLLM's own report (0..1); the blocks hetflow's running requests need count when
    they are more (the report lags the requests just admitted). ``retained_tokens``: paused programs'
    contexts held for their next calls (``FrontQueue.retained_tokens``), which vLLM counts as free: other
    programs' only, since the head's own context is the prefix its prompt's blocks count."""
    running = list(running)
    if len(running) >= max_num_seqs:
        return False
    held_prompt_blocks: set[int] = set()
    ours = 0
    for r in running:
        ours += blocks_for(r.prompt_tokens + r.output_tokens + 1, block_size) - _shared(r, held_prompt_blocks)
        held_prompt_blocks.update(r.block_hashes)
    used = max(ours, int(kv_usage * num_blocks)) + blocks_for(retained_tokens, block_size)
    needed = (blocks_for(head.prompt_tokens + 1, block_size) - _shared(head, held_prompt_blocks)
              + int(KV_WATERMARK * num_blocks))
    if head.reserve_output_tokens and running:
        needed += sum(growth_blocks_left(r.prompt_tokens, r.reserve_output_tokens,
                                         blocks_for(r.prompt_tokens + r.output_tokens + 1, block_size), block_size)
                      for r in [*running, head])
    return num_blocks - used >= needed


def _shared(req: EngineRequest, held_prompt_blocks: set[int]) -> int:
    """``req``'s full prompt blocks already held (chained hashes: a match is the same prefix)."""
    return sum(1 for block_hash in req.block_hashes if block_hash in held_prompt_blocks)
