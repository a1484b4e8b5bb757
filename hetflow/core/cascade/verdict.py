"""What follows a graded stage (Cascadia 3.3, figure 4): accept the answer, or forward the call to the
next model type. A pure function of the stage, its grade and the thresholds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

ACCEPTED, ESCALATED, LAST_MODEL = "accepted", "escalated", "last-model"


@dataclass(frozen=True)
class Verdict:
    outcome: str
    """``accepted``, ``escalated`` or ``last-model`` (c_C's answer is returned without a judge)."""
    threshold: float | None
    why: str


def verdict(stage: int, score: float | None, thresholds: Sequence[float], judge_failure: str = "") -> Verdict:
    """Stage ``stage`` (1-based) of a cascade of ``len(thresholds) + 1`` model types graded ``score``.
    Cascadia 3.3: "a set of thresholds H = {h_1, ..., h_{C-1}} is defined to decide whether the requests
    at each model type should be accepted or forwarded to the next model type": accepted when
    score >= h_i. A stage the judge could not grade (``score`` None) is forwarded: quality is what the
    cascade promises, and only a larger model's answer can still meet it."""
    if stage > len(thresholds):
        return Verdict(LAST_MODEL, None, f"c_{stage} is the last model type: its answer is returned ungraded")
    h = thresholds[stage - 1]
    if score is None:
        return Verdict(ESCALATED, h, f"judge gave no grade ({judge_failure or 'no reason'}): forwarded")
    if score >= h:
        return Verdict(ACCEPTED, h, f"grade {score:.1f} >= h_{stage} {h:.1f}")
    return Verdict(ESCALATED, h, f"grade {score:.1f} < h_{stage} {h:.1f}")
