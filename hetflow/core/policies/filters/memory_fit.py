"""Filter: Kairos's memory-aware time-slot packer (6) deciding which engines have room.

Each engine's ledger of expected KV use per slot (eq. 3) with the call's plan added (eq. 1-2) must stay
within its capacity in every slot, and an engine that reported preemptions is left out until it
recovers; with none left the call waits for the next slot in the balancer's hold queue. The scorers
then choose among the engines that fit: memory decides where the call may go, the scorers where it
should.
"""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import EngineFilter, Prediction
from hetflow.core.policies.memory_packer import engines_with_room
from hetflow.core.snapshot import ClusterSnapshot, EngineView


@plugin("engine-filter", "memory-fit")
class MemoryFit(EngineFilter):
    plans_memory = True

    def keep(self, call: LlmCall, engines: list[EngineView], snapshot: ClusterSnapshot,
             prediction: Prediction) -> list[EngineView]:
        return engines_with_room(call, engines, snapshot, prediction)[0]
