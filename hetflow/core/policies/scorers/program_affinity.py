"""Scorer: prefix affinity for the calls that continue a program; none for a program's first call.

llm-d's prefix-cache scorer (``prefix-affinity``) gives every call the share of its prompt blocks an
engine likely holds. A program's first call shares with the engines only what every program shares
(the agents' system prompt, the tool instructions), which one prefill puts on any engine; scored as
affinity, it sends every new program to the engines that hold it first, and on a pool with room to
spare, where nothing waits and KV use is level, nothing pulls the other way: the herding of issue 33
(docs/results.md, one engine taking 38-53% of the calls of four).

hetflow knows which calls continue a program (the monitor's record of its dispatches), so this scorer
scores those as ``prefix-affinity`` does, the context they bring back being their own, and gives a
first call 0 on every engine: new programs are placed by the load scorers, ties taking turns, and
stay where they start. The same idea as vLLM's router's home rank (balance from the hash, locality
from the binding) and Autellix's locality rule (short prompts by load, a program's long ones on its
engine), with hetflow's own program record in place of the hash.
"""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import EngineScorer, PolicyStore, Prediction
from hetflow.core.policies.scorers.prefix_affinity import PrefixAffinity
from hetflow.core.snapshot import ClusterSnapshot, EngineView


@plugin("engine-scorer", "program-affinity")
class ProgramAffinity(EngineScorer):
    reads_prefix = True
    reads_resident = True

    def __init__(self, max_prefix_blocks: int = 256, first_call_fill_tolerance: float | None = None) -> None:
        if first_call_fill_tolerance is not None and first_call_fill_tolerance < 0:
            raise ValueError(f"first_call_fill_tolerance must be >= 0, got {first_call_fill_tolerance}")
        self.prefix = PrefixAffinity(max_prefix_blocks)
        self.first_call_fill_tolerance = first_call_fill_tolerance

    def score(self, call: LlmCall, engines: list[EngineView], snapshot: ClusterSnapshot, prediction: Prediction,
              store: PolicyStore) -> dict[str, float]:
        if snapshot.program_dispatches:
            return self.prefix.score(call, engines, snapshot, prediction, store)
        if self.first_call_fill_tolerance is None or not engines:
            return {e.engine_id: 0.0 for e in engines}
        fills = {e.engine_id: resident_fill(e) for e in engines}
        limit = sum(fills.values()) / len(fills) * (1.0 + self.first_call_fill_tolerance)
        prefix = self.prefix.score(call, engines, snapshot, prediction, store)
        return {engine_id: prefix[engine_id] if fill <= limit else 0.0 for engine_id, fill in fills.items()}


def resident_fill(engine: EngineView) -> float:
    """The share of the engine's KV the active programs placed on it hold (``resident_tokens``)."""
    return engine.resident_tokens / engine.kv_capacity_tokens if engine.kv_capacity_tokens else 0.0
