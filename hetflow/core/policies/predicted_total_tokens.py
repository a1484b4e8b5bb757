"""Priority: the predicted total remaining output tokens of the workflow, pi_r = y-hat (Chimera 3.6),
so engines serve the shortest total job first (STJF)."""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import Choice, Prediction, Priority, PriorityContext, PriorityRule


@plugin("priority-rule", "predicted-total-tokens")
class PredictedTotalTokens(PriorityRule):

    def priority(self, call: LlmCall, prediction: Prediction, context: PriorityContext) -> tuple[Priority, Choice]:
        y_hat = prediction.median_tokens
        scores = {"median_tokens": y_hat, **{f"q{q:g}": v for q, v in prediction.quantile_tokens.items()}}
        return Priority(y_hat), Choice(f"{y_hat:g}", "stjf:predicted-total-tokens", scores=scores)
