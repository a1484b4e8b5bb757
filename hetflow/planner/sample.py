"""The planner's profiled sample from a hetflow trace: each call as every model of the cascade would
answer it, with the judge's grade (Cascadia 3.3 footnote 3: "profiling a subsample of the input
workload across all cascade models to obtain per-model quality score distributions").

Traces carry each model's lengths for every call and whether the model solves the call's program
(``StageRecord.correct``, from the item-response model of ``hetflow.workloads.correctness``); a call is
graded as its program's outcome on that model. The judge is modelled, not run: it agrees with that
outcome with probability ``judge_agreement`` (0.85, GPT-4's agreement with human experts on MT-Bench,
Zheng et al. 2023, the LLM-as-a-judge paper Cascadia 4.1 cites) and grades 0-100, an answer it takes
as right in [60, 100], else in [0, 40). Grades are a deterministic hash of the call, the model and
the seed, so a sample is the same in every process.
"""

from __future__ import annotations

import hashlib
import random
from typing import Sequence

from hetflow.core.trace import StageRecord
from hetflow.planner.routing import SampledRequest

JUDGE_AGREEMENT = 0.85


def _uniforms(*key: object) -> tuple[float, float]:
    digest = hashlib.sha256(repr(key).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64, int.from_bytes(digest[8:16], "big") / 2**64


def judge_grade(correct: bool, *key: object, judge_agreement: float = JUDGE_AGREEMENT) -> float:
    """The judge's 0-100 grade of an answer whose ground truth is ``correct`` (module docstring)."""
    agree, spread = _uniforms(*key)
    judged_right = correct if agree < judge_agreement else not correct
    return 60.0 + 40.0 * spread if judged_right else 40.0 * spread


def sample_from_trace(records: Sequence[StageRecord], models: Sequence[str], size: int, seed: int = 0,
                      judge_agreement: float = JUDGE_AGREEMENT) -> list[SampledRequest]:
    """``size`` calls drawn without replacement from ``records``, each as ``models`` answer it."""
    usable = [r for r in records if all(m in r.correct and m in r.output_tokens for m in models)]
    if not usable:
        raise ValueError(f"no call of the trace was answered by every model of the cascade ({', '.join(models)})")
    chosen = random.Random(seed).sample(usable, min(size, len(usable)))
    return [SampledRequest(
        input_tokens={m: r.input_tokens[m] for m in models},
        output_tokens={m: r.output_tokens[m] for m in models},
        score={m: judge_grade(r.correct[m], r.program_id, r.stage_index, m, seed, judge_agreement=judge_agreement)
               for m in models}) for r in chosen]
