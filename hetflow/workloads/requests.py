"""Independent requests for the load-balancer paper's setting (section 3, 5): every call of the families'
programs (ShareGPT conversations' turns, HumanEval and math programs' stages, ...) becomes a one-call
program of its own, shuffled and arriving as a Poisson process, as the paper samples its mixed dataset
"uniformly at random" at a fixed rate. Each keeps its full input for every model (history and upstream
outputs included) and carries no prefix to share, so routing is about lengths alone."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Sequence

from hetflow.core.trace import StageRecord
from hetflow.workloads import arrivals
from hetflow.workloads.models import DEFAULT_MODELS, STAND_INS

MIXED_FAMILIES = ("chat", "code", "math", "sql", "kairos-qa")
"""ShareGPT plus task mixes (issue 16)."""


def independent_requests(requests_n: int, seed: int, rate_per_s: float = 1.0,
                         families: Sequence[str] = MIXED_FAMILIES,
                         models: Sequence[str] = DEFAULT_MODELS) -> list[StageRecord]:
    """``requests_n`` calls drawn from ``families`` in equal shares, one program each, Poisson at
    ``rate_per_s``; the same arguments give the same requests. A model of ``STAND_INS`` gets its stand-in's
    token counts and answers."""
    from hetflow.workloads.generate import generate

    if requests_n < 1 or not families:
        raise ValueError("independent_requests needs requests_n >= 1 and at least one family")
    rng = random.Random(f"requests:{seed}")
    per_family = -(-requests_n // len(families))
    pool: list[StageRecord] = []
    traced = sorted({STAND_INS.get(m, m) for m in models})
    for i, family in enumerate(families):
        calls = [_as_served(c, models) for c in generate(family, per_family, seed + 1000 * i, traced)]
        pool += rng.sample(calls, min(per_family, len(calls)))
    rng.shuffle(pool)
    times = arrivals.poisson(requests_n, rate_per_s, rng)
    return [replace(r, program_id=f"req-{k}", stage_index=1, stage_count=1, depends_on=[], upstream_agent="",
                    arrival_s=t, tool_s=0.0, prompt_parts=[])
            for k, (r, t) in enumerate(zip(pool, times))]


def _as_served(record: StageRecord, models: Sequence[str]) -> StageRecord:
    """The record's per-model figures keyed by the served models (a stand-in's copied to its model)."""
    def keyed(values: dict) -> dict:
        return {m: values[STAND_INS.get(m, m)] for m in models}

    return replace(record, input_tokens=keyed(record.input_tokens), output_tokens=keyed(record.output_tokens),
                   correct=keyed(record.correct), solve_probability=keyed(record.solve_probability),
                   visible_solve_probability=keyed(record.visible_solve_probability))
