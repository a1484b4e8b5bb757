"""Model stage of a router that knows engines, not models: the engine stage chooses among every
candidate model's healthy engines and the model is the chosen engine's.

This is how vLLM's data-parallel balancer, llm-d's endpoint picker, SGLang's router and Dynamo's KV
router would serve a pool whose engines run different models behind one name: they pick an engine,
and what it serves is what the call gets. It reads no router confidence and keeps no program
affinity. The engine stage reads the first candidate model's prediction (these routers read none).
"""

from __future__ import annotations

from typing import Mapping

from hetflow.core.call import LlmCall
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import Choice, ModelPicker, PolicyStore, Prediction
from hetflow.core.snapshot import ClusterSnapshot


@plugin("model-picker", "engine-first")
class EngineFirst(ModelPicker):
    engine_first = True

    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, confidence: Mapping[str, float],
             predictions: Mapping[str, Prediction], store: PolicyStore) -> Choice:
        raise RuntimeError("engine-first has no model choice of its own: the pipeline asks the engine stage")
