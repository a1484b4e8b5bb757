"""Priority: first come, first served. Every request gets the same priority, so the engine queue's
tie-breaker, arrival, orders them (vLLM's default)."""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.plugins import plugin
from hetflow.core.policies import Choice, Prediction, PriorityContext, PriorityRule


@plugin("priority-rule", "fcfs")
class Fcfs(PriorityRule):

    def priority(self, call: LlmCall, prediction: Prediction, context: PriorityContext) -> tuple[float, Choice]:
        return 0.0, Choice("0", "fcfs")
