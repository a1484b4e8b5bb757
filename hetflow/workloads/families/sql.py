"""HexGen-Flow's agentic text-to-SQL workflow (3.3) as a DAG:

    schema linking -> k parallel SQL candidates -> 0..10 self-correction rounds -> evaluation

k is 2-5; the correction rounds run in sequence after all candidates and grow with the question's
difficulty (Poisson with mean exp(0.9 b), capped at 10), so a hard question loops longer.
Questions come from templates over four synthetic schemas, in four complexity tiers (filter,
aggregate, join, nested): the tier is the difficulty the text carries. No public text-to-SQL data
ships in a package here, hence the templates; stage lengths are assumed (docs/workloads.md).
"""

from __future__ import annotations

import math
import random
from typing import cast

from hetflow.workloads.build import LengthSampler, ProgramPlan, StagePlan
from hetflow.workloads.families.common import assumed_lengths

SCHEMAS = {
    "hr": {"employees": ["name", "salary", "hire_year", "title"], "departments": ["name", "budget", "city"]},
    "retail": {"orders": ["total", "order_date", "status"], "customers": ["name", "country", "signup_year"]},
    "school": {"students": ["name", "grade", "age"], "courses": ["title", "credits", "teacher"]},
    "flights": {"flights": ["origin", "destination", "duration"], "airlines": ["name", "country", "fleet_size"]},
}
TIERS = (  # (tier, difficulty, template)
    ("filter", -0.8, "List the {c1} of all {t1} whose {c2} is greater than {n}."),
    ("aggregate", -0.2, "What is the average {c2} of {t1}, grouped by {c1}?"),
    ("join", 0.4, "For each of the {t2}, show its {d1} together with the number of {t1} linked to it."),
    ("nested", 1.0, "Which {t2} have more {t1} than the average number of {t1} per {t2}, ordered by {d1}?"),
)
AGENTS = {
    "schema_linker": "You link the question to the tables and columns of the schema. List them.",
    "sql_writer": "You write one SQL query that answers the question over the linked schema.",
    "sql_fixer": "You run the candidate queries' errors and results, and correct the best query.",
    "evaluator": "You compare the candidates' results and return the final SQL.",
}
MEAN_TOKENS = {"schema_linker": 120, "sql_writer": 90, "sql_fixer": 110, "evaluator": 40}
MAX_CORRECTION_ROUNDS = 10
UNEXPLAINED_SD = 0.3
"""The difficulty's spread within a tier, which the question's text does not show."""


def _poisson(rng: random.Random, lam: float) -> int:
    k, p, limit = 0, 1.0, math.exp(-lam)
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def _question(rng: random.Random) -> tuple[str, str, float, str]:
    schema_name = rng.choice(sorted(SCHEMAS))
    (t1, cols1), (t2, cols2) = list(SCHEMAS[schema_name].items())
    tier, difficulty, template = rng.choice(TIERS)
    question = template.format(t1=t1, t2=t2, c1=cols1[0], c2=rng.choice(cols1[1:]), d1=rng.choice(cols2),
                               n=rng.randrange(10, 1000))
    schema = "; ".join(f"{t}({', '.join(['id', *cols])})" for t, cols in SCHEMAS[schema_name].items())
    return f"Schema: {schema}\nQuestion: {question}", schema_name, difficulty, tier


def plan(n: int, rng: random.Random) -> list[ProgramPlan]:
    plans = []
    for _ in range(n):
        text, schema_name, tier_difficulty, tier = _question(rng)
        difficulty = tier_difficulty + rng.gauss(0, UNEXPLAINED_SD)
        k = rng.randint(2, 5)
        rounds = min(MAX_CORRECTION_ROUNDS, _poisson(rng, math.exp(0.9 * difficulty)))
        stages = [StagePlan("schema_linker", AGENTS["schema_linker"], text)]
        stages += [StagePlan("sql_writer", AGENTS["sql_writer"], text, [1]) for _ in range(k)]
        previous = list(range(2, k + 2))
        for _ in range(rounds):
            stages.append(StagePlan("sql_fixer", AGENTS["sql_fixer"], text, previous))
            previous = [len(stages)]
        stages.append(StagePlan("evaluator", AGENTS["evaluator"], text, previous))
        means = [MEAN_TOKENS[s.agent] for s in stages]
        plans.append(ProgramPlan(
            workflow="sql", variant=f"k{k}-r{rounds}", stages=stages, difficulty=difficulty,
            visible_difficulty=tier_difficulty, hidden_difficulty_sd=UNEXPLAINED_SD,
            accuracy_family="general",
            lengths=cast(LengthSampler,
                         lambda m, r, means=means, z=tier_difficulty / 0.7: assumed_lengths(means, m, r, item_z=z)),
            bonus=0.05 * rounds, item={"source": "templates", "schema": schema_name, "tier": tier,
                                       "candidates": k, "correction_rounds": rounds}))
    return plans
