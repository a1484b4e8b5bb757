"""Maximum capacity usage (load-balancer paper, C.3.2): the request "is routed to the model with the maximum
capacity available, given that it can process this particular request". Capacity is the engine's free KV
(its capacity less what it reports in use and what was dispatched to it since, unprefilled); the request
needs its prompt plus its predicted decode tokens. When no engine can take it now, the call waits and is
tried again a second later ("at intervals of one second"). A baseline of issue 16. Ties: engine id."""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.plugins import plugin
from hetflow.core.policies import (
    Choice,
    EnginePicker,
    PolicyStore,
    Prediction,
    WaitForCapacity,
    healthy_or_unavailable,
)
from hetflow.core.rl_router.hold import free_kv_tokens
from hetflow.core.snapshot import ClusterSnapshot

RETRY_S = 1.0


@plugin("engine-picker", "max-capacity")
class MaxCapacity(EnginePicker):
    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, model: str, prediction: Prediction,
             store: PolicyStore) -> Choice:
        engines = healthy_or_unavailable(snapshot, model)
        free = {e.engine_id: free_kv_tokens(e) for e in engines}
        need = call.input_tokens + prediction.median_tokens
        fitting = [e for e in engines if free[e.engine_id] >= need]
        if not fitting:
            raise WaitForCapacity(f"no engine of {model} has {need:.0f} free KV tokens (most: "
                                  f"{max(free.values()):.0f})", RETRY_S)
        best = max(fitting, key=lambda e: (free[e.engine_id], e.engine_id))
        return Choice(best.engine_id, "max-capacity", loads=free, params={"need_tokens": need})
