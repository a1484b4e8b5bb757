"""Multi-turn chat chains from ShareGPT V3: each turn is a call that depends on the previous one.

Prompts are the real human turns; output lengths are the real responses' lengths (the empirical
distribution is the fit), scaled per model by ``model_length_factor`` with 15% log-normal jitter.
Difficulty (accuracy family "general"): longer first prompts and code in them are harder.
"""

from __future__ import annotations

import math
import random
from typing import cast

from hetflow.core.tokens import count_tokens
from hetflow.workloads.build import LengthSampler, ProgramPlan, StagePlan
from hetflow.workloads.families.common import model_length_factor, sharegpt_chains

SYSTEM = "You are a helpful assistant."
JITTER_SIGMA = 0.15
UNEXPLAINED_SD = 0.5
"""The difficulty's spread around what the first turn's length and code show."""


def plan(n: int, rng: random.Random) -> list[ProgramPlan]:
    chains = sharegpt_chains()
    plans = []
    for _ in range(n):
        turns = chains[rng.randrange(len(chains))]
        first = turns[0][0]
        real = [tokens for _, tokens in turns]
        difficulty = 0.4 * (math.log(count_tokens(first) + 1) - 3.5) + 0.4 * ("```" in first or "def " in first)
        plans.append(ProgramPlan(
            workflow="chat", variant=f"{len(turns)}-turn",
            stages=[StagePlan("assistant", SYSTEM, text, [i] if i else []) for i, (text, _) in enumerate(turns)],
            difficulty=difficulty + rng.gauss(0, UNEXPLAINED_SD), visible_difficulty=difficulty,
            hidden_difficulty_sd=UNEXPLAINED_SD, accuracy_family="general",
            lengths=cast(LengthSampler, lambda m, r, real=real: [max(1, int(round(t * model_length_factor(m) *
                                                                                math.exp(r.gauss(0, JITTER_SIGMA)))))
                                                                 for t in real]),
            item={"source": "sharegpt", "turns": len(turns), "real_output_tokens": real}))
    return plans
