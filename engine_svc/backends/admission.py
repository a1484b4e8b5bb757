"""When a vLLM engine has room for hetflow's next request: the rule both vLLM backends admit by.

hetflow keeps waiting requests in its own aging queue (Chimera 3.7) and hands vLLM the head only when
vLLM could schedule it now: fewer running than ``max_num_seqs`` and free KV blocks for the prompt plus
one token and a watermark, as vLLM's own scheduler checks before it admits (``KVCacheManager.allocate_slots``,
``watermark``). So vLLM's waiting queue stays (nearly) empty and the order work starts in is hetflow's.
"""

from __future__ import annotations

from typing import Iterable

from hetflow.core.engine.kv_cache import blocks_for
from hetflow.core.engine.request import EngineRequest

KV_WATERMARK = 0.01
"""Share of blocks kept free at admission, as vLLM's own watermark."""


def has_room(head: EngineRequest, running: Iterable[EngineRequest], max_num_seqs: int, kv_usage: float,
             num_blocks: int, block_size: int) -> bool:
    """``kv_usage`` is vLLM's own report (0..1); the blocks hetflow's running requests need count when
    they are more (the report lags the requests just admitted)."""
    running = list(running)
    if len(running) >= max_num_seqs:
        return False
    ours = sum(blocks_for(r.prompt_tokens + r.output_tokens + 1, block_size) for r in running)
    used = max(ours, int(kv_usage * num_blocks))
    needed = blocks_for(head.prompt_tokens + 1, block_size) + int(KV_WATERMARK * num_blocks)
    return num_blocks - used >= needed
