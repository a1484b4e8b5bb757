"""Priority: Autellix's program-level attained service (4.2.1), least served first (a rival).

- ``plas`` (eq. 1): the execution time of the program's completed calls, summed;
- ``atlas`` (eq. 2): for programs that run calls in parallel, the longest chain of execution time
  leading to the call (0 for a root), kept as one value per program that each completed call raises
  to its inherited value plus its own time (Algorithm 1, line 4).
The monitor keeps both from the calls' execution times (first scheduled to finished). Autellix puts
calls into K discretised queues by this value, with time quanta and a starvation ratio beta; the
paper gives no K, bounds, quanta or beta, so the value itself is the ordering key (the limit of fine
queues) and the engine queue's aging is the anti-starvation.
"""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import Choice, Prediction, Priority, PriorityContext, PriorityRule


@plugin("priority-rule", "attained-service")
class AttainedService(PriorityRule):
    def __init__(self, variant: str = "atlas") -> None:
        if variant not in ("plas", "atlas"):
            raise ValueError(f"attained-service variant must be plas or atlas, got {variant!r}")
        self.variant = variant

    def priority(self, call: LlmCall, prediction: Prediction, context: PriorityContext) -> tuple[Priority, Choice]:
        snapshot = context.snapshot
        service_s = snapshot.program_service_s if self.variant == "plas" else snapshot.program_critical_service_s
        return Priority(service_s), Choice(f"{service_s:g}", f"autellix:{self.variant}",
                                           scores={"plas_s": snapshot.program_service_s,
                                                   "atlas_s": snapshot.program_critical_service_s})
