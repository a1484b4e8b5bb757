"""A modelled judge, for what runs without one (the planner's profiled sample, the simulator, training
data for the learned scorer): it grades an answer from the trace's ground truth instead of reading it.

Traces carry whether each model solves each program (``StageRecord.correct``, from the item-response
model of ``hetflow.workloads.correctness``); the judge agrees with that outcome with probability
``judge_agreement`` (0.85, GPT-4's agreement with human experts on MT-Bench, Zheng et al. 2023, the
LLM-as-a-judge paper Cascadia 4.1 cites) and grades 0-100: an answer it takes as right in [60, 100],
else in [0, 40). Grades are a deterministic hash of the key (call, model, seed), so they are the same
in every process.
"""

from __future__ import annotations

import hashlib

JUDGE_AGREEMENT = 0.85
JUDGED_RIGHT_MIN = 60.0
"""A grade at least this means the judge took the answer as right."""


def _uniforms(*key: object) -> tuple[float, float]:
    digest = hashlib.sha256(repr(key).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64, int.from_bytes(digest[8:16], "big") / 2**64


def judge_grade(correct: bool, *key: object, judge_agreement: float = JUDGE_AGREEMENT) -> float:
    """The judge's 0-100 grade of an answer whose ground truth is ``correct`` (module docstring)."""
    agree, spread = _uniforms(*key)
    judged_right = correct if agree < judge_agreement else not correct
    return JUDGED_RIGHT_MIN + 40.0 * spread if judged_right else 40.0 * spread
