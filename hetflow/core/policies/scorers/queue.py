"""Scorer: the engine's waiting queue, shortest best.

The Gateway API Inference Extension's queue scorer (llm-d's default profile, weight 2): ``(max - q) /
(max - min)`` over the candidates, 1 for all when every queue is equal, where q is the engine's
reported ``vllm:num_requests_waiting`` (llm-d/llm-d-inference-scheduler ``pkg/epp/.../scorer/
queuedepth/queue.go``). ``count_dispatched`` adds the calls sent since the engine's last report, which
the report cannot show yet (hetflow's monitor knows them; the Extension's scraped metrics do not).
"""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import EngineScorer, PolicyStore, Prediction, min_max_scores
from hetflow.core.snapshot import ClusterSnapshot, EngineView


@plugin("engine-scorer", "queue")
class Queue(EngineScorer):
    def __init__(self, count_dispatched: bool = False) -> None:
        self.count_dispatched = count_dispatched

    def score(self, call: LlmCall, engines: list[EngineView], snapshot: ClusterSnapshot, prediction: Prediction,
              store: PolicyStore) -> dict[str, float]:
        return min_max_scores({e.engine_id: float(e.waiting + (e.dispatched_since_report if self.count_dispatched
                                                                else 0)) for e in engines})
