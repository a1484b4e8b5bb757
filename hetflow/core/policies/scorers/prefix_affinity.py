"""Scorer: the share of the call's prompt blocks the engine likely holds in its prefix cache.

The Gateway API Inference Extension's prefix-cache scorer (llm-d's default profile, weight 3):
``matched blocks / total blocks`` of the prompt, at most ``max_prefix_blocks`` of them, where the match
runs over the leading blocks the engine was recently sent (``hetflow.core.monitor.prefix_index``:
an LRU per engine, updated on dispatch, as that scorer's index is updated after routing); 0 for a
call without blocks (llm-d/llm-d-inference-scheduler ``pkg/epp/.../scorer/prefix/plugin.go``,
defaults in ``dataproducer/approximateprefix/types.go``).
"""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import EngineScorer, PolicyStore, Prediction
from hetflow.core.snapshot import ClusterSnapshot, EngineView


@plugin("engine-scorer", "prefix-affinity")
class PrefixAffinity(EngineScorer):
    reads_prefix = True

    def __init__(self, max_prefix_blocks: int = 256) -> None:
        if max_prefix_blocks < 1:
            raise ValueError(f"prefix-affinity needs max_prefix_blocks >= 1, got {max_prefix_blocks}")
        self.max_prefix_blocks = max_prefix_blocks

    def score(self, call: LlmCall, engines: list[EngineView], snapshot: ClusterSnapshot, prediction: Prediction,
              store: PolicyStore) -> dict[str, float]:
        total = min(len(call.prefix_blocks), self.max_prefix_blocks)
        return {e.engine_id: min(e.prefix_match_blocks, total) / total if total else 0.0 for e in engines}
