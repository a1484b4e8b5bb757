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
from hetflow.core.policies import EngineScorer, PolicyStore, Prediction
from hetflow.core.policies.scorers.prefix_affinity import PrefixAffinity
from hetflow.core.snapshot import ClusterSnapshot, EngineView


@plugin("engine-scorer", "program-affinity")
class ProgramAffinity(EngineScorer):
    reads_prefix = True

    def __init__(self, max_prefix_blocks: int = 256) -> None:
        self.prefix = PrefixAffinity(max_prefix_blocks)

    def score(self, call: LlmCall, engines: list[EngineView], snapshot: ClusterSnapshot, prediction: Prediction,
              store: PolicyStore) -> dict[str, float]:
        if not snapshot.program_dispatches:
            return {e.engine_id: 0.0 for e in engines}
        return self.prefix.score(call, engines, snapshot, prediction, store)
