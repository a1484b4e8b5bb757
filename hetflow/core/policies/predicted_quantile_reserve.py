"""Reserve: room for the call's output at an upper quantile of the predictor (issue 35), so that the
calls an engine runs do not grow into each other's blocks and preempt.

The engine admits a call only while its free blocks cover every running call's remaining growth (whole
prompt plus reserved output, less what it holds) and the new call's (``BatchScheduler``). The rule lives
in the engine, not the balancer, because only the engine knows each running call's blocks and progress
exactly (shared prefix blocks counted once); the balancer sees them every report interval. vLLM's
router reserves at the router instead, a fixed decode buffer per program over scraped usage.

The call's reserved output is the predictor's ``quantile`` of the workflow's remaining output split
evenly over its remaining stages (``cost.call_output_tokens`` at that quantile; HexGen-Flow eq. 2 wants
the call's own length, which Chimera's predictor does not give), at most ``max_tokens``. Without that
quantile in the prediction, the median stands in and the receipt says so.
"""

from __future__ import annotations

from dataclasses import replace

from hetflow.core.call import LlmCall
from hetflow.core.cost import call_output_tokens
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import Choice, Prediction, PriorityContext, ReserveRule


@plugin("reserve-rule", "predicted-quantile")
class PredictedQuantileReserve(ReserveRule):
    def __init__(self, quantile: float = 0.9) -> None:
        if not 0.5 <= quantile < 1.0:
            raise ValueError(f"predicted-quantile reserve needs 0.5 <= quantile < 1, got {quantile}")
        self.quantile = quantile

    def reserve_tokens(self, call: LlmCall, prediction: Prediction, context: PriorityContext) -> tuple[int, Choice]:
        upper = prediction.quantile_tokens.get(self.quantile)
        rule = "predicted-quantile" if upper is not None else "no-quantile:median"
        at = prediction if upper is None else replace(prediction, median_tokens=max(upper, prediction.median_tokens))
        tokens = max(1, int(round(call_output_tokens(call, at))))
        return tokens, Choice(str(tokens), rule, params={"quantile": self.quantile})
