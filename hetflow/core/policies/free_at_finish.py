"""Retention: none. A call's KV is freed the moment it finishes, as every vLLM engine does (its blocks
stay cached only until an allocation evicts them); the baseline of the ``workflow-ttl`` rule."""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import Choice, PriorityContext, RetentionRule


@plugin("retention-rule", "free-at-finish")
class FreeAtFinish(RetentionRule):

    def hold_s(self, call: LlmCall, context: PriorityContext) -> tuple[float | None, Choice]:
        return None, Choice("0", "free-at-finish")
