"""Priority: the call's own predicted output length, shortest first, with no workflow awareness:
the ordering of learning-to-rank schedulers (LTR, Fu et al. 2024), the baseline Chimera compares its
workflow-level STJF against. What differs from ``predicted-total-tokens`` is what is predicted: the
call alone, not the rest of its workflow (``prediction_target``)."""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import Choice, Prediction, Priority, PriorityContext, PriorityRule


@plugin("priority-rule", "predicted-call-tokens")
class PredictedCallTokens(PriorityRule):
    prediction_target = "call"

    def priority(self, call: LlmCall, prediction: Prediction, context: PriorityContext) -> tuple[Priority, Choice]:
        y_hat = prediction.median_tokens
        return Priority(y_hat), Choice(f"{y_hat:g}", "ltr:predicted-call-tokens", scores={"median_tokens": y_hat})
