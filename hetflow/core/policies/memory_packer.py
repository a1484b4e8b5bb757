"""Engine choice: Kairos's memory-aware time-slot packer (6).

The call's KV use is planned as its prompt, growing at the engine's decode speed until its expected
end (eq. 1-2: the agent's most likely execution time, from the monitor; without one, the predicted
output at that speed). Added to the engine's ledger of expected use per 0.5 s slot (eq. 3), an engine
is available when no slot exceeds its KV capacity; among the available ones the lowest expected peak,
as a share of the engine's capacity (engines differ in size), wins, or, with ``then:
workload-balanced``, HexGen-Flow's eq. 4 score among them: memory decides where the call may go and
compute where it should (engines on different GPUs differ in speed, which the peak alone ignores).
With none available the call waits for the next slot (``WaitForCapacity``); an engine that reported
preemptions is left out until it recovers. A call no engine of the model could ever hold is
RESOURCE_EXHAUSTED, with the sizes.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from hetflow.core.call import LlmCall
from hetflow.core.cost import call_output_tokens
from hetflow.core.errors import ResourceExhausted
from hetflow.core.monitor.memory_ledger import SLOT_S, MemoryPlan
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import (
    Choice,
    EnginePicker,
    PolicyStore,
    Prediction,
    WaitForCapacity,
    healthy_or_unavailable,
)
from hetflow.core.policies.workload_balanced import WorkloadBalanced
from hetflow.core.snapshot import ClusterSnapshot, EngineView


def plan_for(call: LlmCall, engine: EngineView, expected_s: float | None, output_tokens: float) -> MemoryPlan:
    """Kairos eq. 1-2 for ``call`` on ``engine``. The decode speed is one token per iteration at the
    engine's current batch (its profile), or per full-batch iteration without a profile."""
    if engine.profile is not None:
        batch = max(1, engine.running + 1)
        step_ms = engine.profile.step_ms(0, batch, round(batch * (call.input_tokens + output_tokens / 2)))
    else:
        step_ms = engine.decode_ms_per_token
    speed = 1e3 / max(step_ms, 1e-6)
    duration = expected_s if expected_s else output_tokens / speed
    # Never planned past prompt + max_tokens: the call cannot decode longer than that at this speed.
    return MemoryPlan(call.input_tokens, speed, min(duration, call.sampling.max_tokens / speed))


@plugin("engine-picker", "memory-packer")
class MemoryPacker(EnginePicker):
    plans_memory = True

    def __init__(self, then: str = "lowest-peak", alpha: float = 0.0, beta: float = 1.0) -> None:
        if then not in ("lowest-peak", "workload-balanced"):
            raise ValueError(f"memory-packer then must be lowest-peak or workload-balanced, got {then!r}")
        self.then = then
        self.balanced = WorkloadBalanced(alpha, beta) if then == "workload-balanced" else None
        self.initial_alpha = alpha if self.balanced is not None else None

    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, model: str, prediction: Prediction,
             store: PolicyStore) -> Choice:
        engines = healthy_or_unavailable(snapshot, model)
        available, peaks = engines_with_room(call, engines, snapshot, prediction)
        if self.balanced is not None:
            among = replace(snapshot, engines=tuple(available))
            choice = self.balanced.pick(call, among, model, prediction, store)
            return replace(choice, rule="kairos:fits;" + choice.rule,
                           params={**choice.params, "slot_s": SLOT_S, "peak_tokens": peaks[choice.chosen]})
        best = min(available, key=lambda e: (peaks[e.engine_id] / max(1, e.kv_capacity_tokens), e.engine_id))
        return Choice(best.engine_id, "kairos:lowest-expected-peak", scores=peaks,
                      loads={e.engine_id: float(e.kv_capacity_tokens) for e in engines},
                      params={"slot_s": SLOT_S, "suspended": float(sum(e.suspended for e in engines))})


def engines_with_room(call: LlmCall, engines: list[EngineView], snapshot: ClusterSnapshot, prediction: Prediction
                      ) -> tuple[list[EngineView], dict[str, float]]:
    """The engines whose ledger (slots of the monitor's ``SLOT_S``) has room for the call in every slot it
    spans (Kairos 6), not suspended,
    and each engine's expected peak with the call added. None now: ``WaitForCapacity`` for the next
    slot; none ever (the call outgrows every engine): RESOURCE_EXHAUSTED."""
    needed = call.input_tokens + call.sampling.max_tokens
    if all(needed > e.kv_capacity_tokens for e in engines):
        raise ResourceExhausted(f"call needs {needed} KV tokens (prompt {call.input_tokens} + max_tokens "
                                f"{call.sampling.max_tokens}); the largest engine holds "
                                f"{max(e.kv_capacity_tokens for e in engines)}")
    output = call_output_tokens(call, prediction)
    peaks, fits = {}, {}
    for e in engines:
        peaks[e.engine_id], fits[e.engine_id] = slot_peak(e, plan_for(call, e, snapshot.agent_expected_s, output))
    available = [e for e in engines if fits[e.engine_id] and not e.suspended]
    if not available:
        raise WaitForCapacity("no engine has room in every slot: expected peaks "
                              + ", ".join(f"{k} {v:.0f}" for k, v in peaks.items()), SLOT_S)
    return available, peaks


def slot_peak(engine: EngineView, plan: MemoryPlan) -> tuple[float, bool]:
    """Expected peak with the call added, and whether every slot it spans stays within capacity."""
    mine = plan.slot_tokens(SLOT_S)
    ledger = np.asarray(engine.kv_ledger_tokens, dtype=float)
    if len(ledger) < len(mine):
        ledger = np.pad(ledger, (0, len(mine) - len(ledger)))
    spanned = ledger[:len(mine)] + mine
    return float(max(spanned.max(), ledger.max())), bool(spanned.max() <= engine.kv_capacity_tokens)
