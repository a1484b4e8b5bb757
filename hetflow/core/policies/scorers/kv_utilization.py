"""Scorer: the engine's free KV cache, ``1 - kv_cache_usage``.

The Gateway API Inference Extension's kv-cache-utilization scorer (llm-d's default profile, weight 2;
llm-d/llm-d-inference-scheduler ``pkg/epp/.../scorer/kvcacheutilization/kvcache_utilization.go``):
under continuous batching a queue forms when KV memory runs out, so the emptier cache is preferred.
"""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import EngineScorer, PolicyStore, Prediction
from hetflow.core.snapshot import ClusterSnapshot, EngineView


@plugin("engine-scorer", "kv-utilization")
class KvUtilization(EngineScorer):
    def score(self, call: LlmCall, engines: list[EngineView], snapshot: ClusterSnapshot, prediction: Prediction,
              store: PolicyStore) -> dict[str, float]:
        return {e.engine_id: min(1.0, max(0.0, 1.0 - e.kv_cache_usage)) for e in engines}
