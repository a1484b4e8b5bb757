"""When a vLLM engine has room for hetflow's next request: the rule both vLLM backends admit by.

hetflow keeps waiting requests in its own aging queue (Chimera 3.7) and hands vLLM the head only when
vLLM could schedule it now: fewer running than ``max_num_seqs`` and free KV blocks for the prompt plus
one token and a watermark, as vLLM's own scheduler checks before it admits (``KVCacheManager.allocate_slots``,
``watermark``). So vLLM's waiting queue stays (nearly) empty and the order work starts in is hetflow's.

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
    ours = sum(blocks_for(r.prompt_tokens + r.output_tokens + 1, block_size) for r in running)
    used = max(ours, int(kv_usage * num_blocks)) + blocks_for(retained_tokens, block_size)
    needed = blocks_for(head.prompt_tokens + 1, block_size) + int(KV_WATERMARK * num_blocks)
    if head.reserve_output_tokens and running:
        needed += sum(growth_blocks_left(r.prompt_tokens, r.reserve_output_tokens,
                                         blocks_for(r.prompt_tokens + r.output_tokens + 1, block_size), block_size)
                      for r in [*running, head])
    return num_blocks - used >= needed
