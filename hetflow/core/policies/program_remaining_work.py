"""Priority: the program's predicted remaining work along its critical path (issue 35, program order).

For a chain this is Chimera's STJF key (3.6): y-hat, the predicted output tokens the workflow has left.
A DAG whose stages run in parallel finishes when its longest branch does, not after the sum of its
branches, so its y-hat overstates how long it has left. Autellix's two attained-service measures
(4.2.1) tell how parallel it has run so far: PLAS (eq. 1) sums the execution time of its completed
calls, ATLAS (eq. 2) keeps the longest chain of them. Their ratio ATLAS / PLAS is 1 for a chain and
1/k for k branches of equal length; the key scales y-hat by it:

    key = y-hat * ATLAS / PLAS      (y-hat for a program with no completed call)

so a DAG is ordered by the remaining work on its critical path, and two programs with the same
remaining tokens, one chain and one fan-out, order the fan-out first (it finishes sooner). The engine
queue's aging (Chimera 3.7) bounds the wait of a long program's calls there.
"""

from __future__ import annotations

from hetflow.core.call import LlmCall
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import Choice, Prediction, Priority, PriorityContext, PriorityRule

SHARE_DIGITS = 9
"""ATLAS and PLAS sum the same call times in different orders, so a chain's ratio comes out a rounding
error below 1; rounded to this many digits it is 1, and programs with equal remaining tokens tie and
keep their arrival order instead of one decided by rounding (which also differed between the
simulator's decode runs and its stepping)."""


def critical_path_share(service_s: float, critical_service_s: float) -> float:
    """ATLAS / PLAS (Autellix eq. 2 over eq. 1), in (0, 1]: 1 for a chain or a program with no completed call."""
    if service_s <= 0:
        return 1.0
    return round(min(1.0, max(critical_service_s, 0.0) / service_s), SHARE_DIGITS) or 1.0


@plugin("priority-rule", "program-remaining-work")
class ProgramRemainingWork(PriorityRule):

    def priority(self, call: LlmCall, prediction: Prediction, context: PriorityContext) -> tuple[Priority, Choice]:
        snap = context.snapshot
        share = critical_path_share(snap.program_service_s, snap.program_critical_service_s)
        y_hat = prediction.median_tokens
        key = y_hat * share
        rule = "stjf:chain" if share == 1.0 else "stjf:dag-critical-path"
        return Priority(key), Choice(f"{key:g}", rule, scores={
            "median_tokens": y_hat, "critical_path_share": share, "plas_s": snap.program_service_s,
            "atlas_s": snap.program_critical_service_s})
