"""Priority: first come, first served. Every request gets the same priority, so the engine queue's
tie-breaker, arrival, orders them (vLLM's default)."""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import Choice, Prediction, Priority, PriorityContext, PriorityRule


@plugin("priority-rule", "fcfs")
class Fcfs(PriorityRule):

    def priority(self, call: LlmCall, prediction: Prediction, context: PriorityContext) -> tuple[Priority, Choice]:
        return Priority(0.0), Choice("0", "fcfs")
