"""The planner's profiled sample from a hetflow trace: each call as every model of the cascade would
answer it, with the judge's grade (Cascadia 3.3 footnote 3: "profiling a subsample of the input
workload across all cascade models to obtain per-model quality score distributions").

A call is graded as its program's outcome on that model, by the modelled judge
(``hetflow.core.cascade.modelled_judge``), the same that grades answers in the simulator.
"""

from __future__ import annotations

import random
from typing import Sequence

from hetflow.core.cascade.modelled_judge import JUDGE_AGREEMENT, judge_grade
from hetflow.core.trace import StageRecord
from hetflow.planner.routing import SampledRequest


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
