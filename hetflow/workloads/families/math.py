"""Chimera's math workflows (appendix A.1) over questions from mathematics-dataset.

Variants, equally likely: Planner -> Solver -> Verifier -> Solver; Planner -> Solver; Solver.
Difficulty of a question: an offset per module group (arithmetic and comparison easy; polynomials,
calculus and probability hard) plus one per level (the easy/medium/hard thirds of the generator's
entropy range, i.e. bigger numbers and more terms in the text); plus N(0, 0.3) unexplained.
Output lengths: calibrated to Chimera 4.1's MATH totals per workflow.
"""

from __future__ import annotations

import random
from typing import cast

from hetflow.workloads.build import LengthSampler, ProgramPlan, chain
from hetflow.workloads.lengths import VariantShape, calibrate
from hetflow.workloads.models import MODELS
from hetflow.workloads.sources import math_questions

PLANNER = "You are a planner. Outline the steps to solve the math problem. Do not compute the answer."
SOLVER = "You are a solver. Solve the math problem step by step and end with 'Answer: <value>'."
VERIFIER = "You are a verifier. Check the solution step by step and say CORRECT or point out the error."
AGENTS = {
    "plan-solve-verify-solve": (("planner", PLANNER), ("solver", SOLVER), ("verifier", VERIFIER), ("solver", SOLVER)),
    "plan-solve": (("planner", PLANNER), ("solver", SOLVER)),
    "solve": (("solver", SOLVER),),
}
SHAPES = (VariantShape("plan-solve-verify-solve", 1.0, (0.5, 1.0, 0.6, 1.0)),
          VariantShape("plan-solve", 1.0, (0.5, 1.0)),
          VariantShape("solve", 1.0, (1.0,)))
BONUS = {"plan-solve-verify-solve": 0.3, "plan-solve": 0.15, "solve": 0.0}
GROUP_OFFSET = {"arithmetic": -0.5, "comparison": -0.4, "measurement": -0.3, "numbers": 0.1, "algebra": 0.3,
                "calculus": 0.4, "polynomials": 0.5, "probability": 0.6}
LEVEL_OFFSET = {"easy": -0.5, "medium": 0.0, "hard": 0.5}
EXPLAINED_SD = 0.55  # spread of module + level offsets over the bank; standardises the length feature
RUNAWAY_TOKENS = 16384
UNEXPLAINED_SD = 0.3


def plan(n: int, rng: random.Random) -> list[ProgramPlan]:
    plans = []
    for q in math_questions(n, rng.getrandbits(32)):
        group = q.module.split("__")[0]
        explained = GROUP_OFFSET.get(group, 0.0) + LEVEL_OFFSET[q.level]
        variant = rng.choice(list(AGENTS))
        shares = next(s.shares for s in SHAPES if s.name == variant)
        plans.append(ProgramPlan(
            workflow="math", variant=variant, stages=chain(AGENTS[variant], q.question),
            difficulty=explained + rng.gauss(0, UNEXPLAINED_SD), visible_difficulty=explained,
            hidden_difficulty_sd=UNEXPLAINED_SD, accuracy_family="math",
            lengths=cast(LengthSampler, lambda m, r, shares=shares, z=explained / EXPLAINED_SD: calibrate(
                SHAPES, *MODELS[m].total_output("math"), RUNAWAY_TOKENS).sample(r, shares, item_z=z)),
            bonus=BONUS[variant],
            item={"source": "mathematics-dataset", "module": q.module, "level": q.level, "answer": q.answer}))
    return plans
