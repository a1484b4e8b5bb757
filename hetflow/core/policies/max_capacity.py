"""Maximum capacity usage (load-balancer paper, C.3.2): the request "is routed to the model with the maximum
capacity available, given that it can process this particular request". Capacity is the engine's free KV
(its capacity less what it reports in use and what was dispatched to it since, unprefilled); the request
needs its prompt plus its predicted decode tokens. When no engine can take it now, the call waits and is
tried again a second later ("at intervals of one second"). A baseline of issue 16. Ties: engine id.

``room: reserved`` is hetflow's variant, the RL router's room rule (``hetflow.core.rl_router.hold``):
capacity is counted against what the in-flight calls will hold at their end, not what is free now; with
``retry_s: 0.02`` (the RL router's step) it is the heuristic the RL router learns from, served as the
balancer serves the router, so the two can be told apart."""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.cost import call_output_tokens
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import (
    Choice,
    EnginePicker,
    PolicyStore,
    Prediction,
    WaitForCapacity,
    healthy_or_unavailable,
)
from hetflow.core.rl_router.hold import free_kv_tokens, reserved_kv_tokens
from hetflow.core.snapshot import ClusterSnapshot, EngineView

RETRY_S = 1.0
ROOMS = ("free", "reserved")


@plugin("engine-picker", "max-capacity")
class MaxCapacity(EnginePicker):
    def __init__(self, room: str = "free", retry_s: float = RETRY_S) -> None:
        if room not in ROOMS:
            raise ValueError(f"max-capacity room must be one of {list(ROOMS)}, got {room!r}")
        if retry_s <= 0:
            raise ValueError(f"max-capacity retry_s must be > 0, got {retry_s}")
        self.room, self.retry_s = room, retry_s
        self.reads_in_flight_calls = room == "reserved"

    def capacity_tokens(self, engine: EngineView) -> float:
        if self.room == "reserved":
            return engine.kv_capacity_tokens - reserved_kv_tokens(engine)
        return free_kv_tokens(engine)

    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, model: str, prediction: Prediction,
             store: PolicyStore) -> Choice:
        engines = healthy_or_unavailable(snapshot, model)
        free = {e.engine_id: self.capacity_tokens(e) for e in engines}
        need = call.input_tokens + call_output_tokens(call, prediction)  # C.3.2: "this particular request"
        fitting = [e for e in engines if free[e.engine_id] >= need]
        if not fitting:
            raise WaitForCapacity(f"no engine of {model} has {need:.0f} free KV tokens (most: "
                                  f"{max(free.values()):.0f})", self.retry_s)
        best = max(fitting, key=lambda e: (free[e.engine_id], e.engine_id))
        return Choice(best.engine_id, f"max-capacity:{self.room}", loads=free, params={"need_tokens": need})
