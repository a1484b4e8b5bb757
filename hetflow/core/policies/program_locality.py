"""Engine choice: Autellix's data-locality load balancer (4.3, Algorithm 2; a rival).

A call of at most ``long_prompt_tokens`` prompt tokens goes to the least-used engine (short prompts
hit common system prompts on any engine); a longer one goes to the engine its program's first long
call went to, or, for a program's first long call, to the least-used engine, which it is then pinned
to. "Least used" is the engine with the fewest calls in flight (its 6.4 "Least Used" baseline; the
monitor's count over every balancer); among equal counts the first by id.
"""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import Choice, EnginePicker, PolicyStore, Prediction, healthy_or_unavailable
from hetflow.core.snapshot import ClusterSnapshot


@plugin("engine-picker", "program-locality")
class ProgramLocality(EnginePicker):
    def __init__(self, long_prompt_tokens: int = 2048) -> None:
        if long_prompt_tokens < 0:
            raise ValueError(f"program-locality needs long_prompt_tokens >= 0, got {long_prompt_tokens}")
        self.long_prompt_tokens = long_prompt_tokens

    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, model: str, prediction: Prediction,
             store: PolicyStore) -> Choice:
        engines = sorted(healthy_or_unavailable(snapshot, model), key=lambda e: e.engine_id)
        loads = {e.engine_id: float(e.in_flight_requests) for e in engines}
        params = {"long_prompt_tokens": float(self.long_prompt_tokens)}
        least = min(engines, key=lambda e: loads[e.engine_id]).engine_id
        if call.input_tokens <= self.long_prompt_tokens:
            return Choice(least, "autellix:short:least-used", loads=loads, params=params)
        pinned = next((engine for engine, tokens in snapshot.program_dispatches
                       if tokens > self.long_prompt_tokens), None)
        if pinned in loads:
            return Choice(pinned, "autellix:long:program-engine", loads=loads, params=params)
        return Choice(least, "autellix:long:least-used", loads=loads, params=params)
