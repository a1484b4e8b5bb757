"""Engine choice: NVIDIA Dynamo's KV-aware router cost (a rival), lowest cost wins.

Per worker, ``cost = overlap_score_weight * prefill_blocks + decode_blocks`` (ai-dynamo/dynamo
``lib/llm/src/kv_router/scheduler.rs``, ``DefaultWorkerSelector``; ``docs/architecture/
kv_cache_routing.md``, "Cost Calculation"), where
- prefill_blocks = (the worker's prompt tokens not yet prefilled + the call's prompt less the blocks
  the worker holds) / block size, unrounded (``sequence.rs``: ``new_tokens`` + ``active_tokens``);
- decode_blocks = the worker's KV blocks in use + the call's blocks it does not hold (``new_blocks`` +
  ``active_blocks``).
Defaults: ``overlap_score_weight`` 1.0, temperature 0 (the argmin, no normalisation; ``config.rs``).
Ties go to the smaller prefix index (Dynamo's smallest radix tree), then the first by id (Dynamo: at
random). Differences, named: the overlap comes from the monitor's index of what each engine was sent
(Dynamo's ``--no-kv-events`` approximate indexer; by default it reads the engines' KV events), and the
in-use blocks and pending prefill come from the engines' reports plus the calls sent since (Dynamo
tracks them from its own routing decisions).
"""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.engine.kv_cache import blocks_for
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import Choice, EnginePicker, PolicyStore, Prediction, healthy_or_unavailable
from hetflow.core.snapshot import ClusterSnapshot, EngineView


def dynamo_cost(call: LlmCall, engine: EngineView, overlap_score_weight: float, block_size: int) -> float:
    overlap_tokens = min(engine.prefix_match_blocks * block_size, call.input_tokens)
    prefill_blocks = (engine.pending_prefill_tokens + call.input_tokens - overlap_tokens) / block_size
    used_blocks = engine.kv_cache_usage * engine.kv_capacity_tokens / block_size
    new_blocks = max(0, len(call.prefix_blocks) - engine.prefix_match_blocks) if call.prefix_blocks \
        else blocks_for(call.input_tokens, block_size)
    return overlap_score_weight * prefill_blocks + used_blocks + new_blocks


@plugin("engine-picker", "kv-overlap-cost")
class KvOverlapCost(EnginePicker):
    reads_prefix = True

    def __init__(self, overlap_score_weight: float = 1.0) -> None:
        if overlap_score_weight < 0:
            raise ValueError(f"kv-overlap-cost needs overlap_score_weight >= 0, got {overlap_score_weight}")
        self.overlap_score_weight = overlap_score_weight

    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, model: str, prediction: Prediction,
             store: PolicyStore) -> Choice:
        engines = healthy_or_unavailable(snapshot, model)
        costs = {e.engine_id: dynamo_cost(call, e, self.overlap_score_weight, _block_size(e)) for e in engines}
        best = min(engines, key=lambda e: (costs[e.engine_id], e.prefix_index_blocks, e.engine_id))
        return Choice(best.engine_id, "dynamo:min-kv-cost", scores=costs,
                      loads={e.engine_id: float(e.prefix_match_blocks) for e in engines},
                      params={"overlap_score_weight": self.overlap_score_weight})


def _block_size(engine: EngineView) -> int:
    return engine.profile.block_size if engine.profile is not None else 16
