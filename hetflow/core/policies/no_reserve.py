"""Reserve: none. A call is admitted on the blocks of its first chunk alone, as vLLM's scheduler admits
it; when running calls outgrow the free blocks, the engine preempts (recomputes) one. The baseline of
the ``predicted-quantile`` reserve."""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import Choice, Prediction, PriorityContext, ReserveRule


@plugin("reserve-rule", "no-reserve")
class NoReserve(ReserveRule):

    def reserve_tokens(self, call: LlmCall, prediction: Prediction, context: PriorityContext) -> tuple[int, Choice]:
        return 0, Choice("0", "no-reserve")
