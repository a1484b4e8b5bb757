"""Chimera's code-generation workflows (appendix A.1), run through the stack by the client.

Variants: (1) Planner -> Coder -> QA agent -> Coder (4 stages); (2) Planner -> Coder; (3) Coder.
Each stage's output becomes part of the next stage's input. The tasks here are a handful of short
programming problems written for the demo; issue 3's workload toolkit brings HumanEval.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass

from hetflow.client import CallResult, HetflowClient

PLANNER = "You are a planner. Break the programming task into short numbered steps. Do not write code."
CODER = "You are a coder. Write a correct, self-contained Python function for the task. Reply with code only."
QA = "You are a QA agent. Review the code against the task, list failing cases, and say PASS or FAIL."

VARIANTS: dict[str, tuple[str, ...]] = {
    "plan-code-qa-code": ("planner", "coder", "qa", "coder"),
    "plan-code": ("planner", "coder"),
    "code": ("coder",),
}
SYSTEM = {"planner": PLANNER, "coder": CODER, "qa": QA}
MAX_TOKENS = {"planner": 160, "coder": 256, "qa": 128}

TASKS = (
    "Write a function that returns the n-th Fibonacci number using iteration.",
    "Given a list of integers, return the length of the longest strictly increasing subsequence.",
    "Check whether a string of brackets ()[]{} is balanced.",
    "Return all prime numbers below n using the sieve of Eratosthenes.",
    "Merge overlapping intervals given as a list of [start, end] pairs.",
    "Return the k most frequent words in a text, ties broken alphabetically.",
    "Rotate an n x n matrix by 90 degrees clockwise in place.",
    "Parse a time string 'HH:MM' and return the number of minutes after midnight, rejecting bad input.",
)


@dataclass
class WorkflowRun:
    program_id: str
    variant: str
    task: str
    calls: list[tuple[str, CallResult]]
    latency_s: float


def stage_messages(agent: str, task: str, history: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The stage input: its system prompt, the task, and every earlier stage's output."""
    context = "\n\n".join(f"[{a} output]\n{text}" for a, text in history)
    user = f"Task: {task}" + (f"\n\n{context}" if context else "")
    return [("system", SYSTEM[agent]), ("user", user)]


async def run_code_workflow(client: HetflowClient, task: str, variant: str = "plan-code-qa-code",
                            want_receipt: bool = True, timeout_s: float | None = 120.0,
                            deadline_unix_s: float = 0.0) -> WorkflowRun:
    """One run; ``timeout_s`` each call's, ``deadline_unix_s`` (0: none) the whole run's, which the
    servers rank its calls by and each call's timeout is cut to."""
    agents = VARIANTS[variant]
    program = client.program("code", stage_count=len(agents), want_receipt=want_receipt,
                             deadline_unix_s=deadline_unix_s)
    start = time.perf_counter()
    history: list[tuple[str, str]] = []
    calls = []
    for agent in agents:
        result = await program.complete(agent, stage_messages(agent, task, history), MAX_TOKENS[agent],
                                        timeout_s=timeout_s)
        history.append((agent, result.text))
        calls.append((agent, result))
    return WorkflowRun(program.program_id, variant, task, calls, time.perf_counter() - start)


RUN_REFUSAL_ATTEMPTS = 5
"""A call the balancer refuses under load is sent again after its retry hint, up to five times in all: the
workflows run through a busy stack rather than fail on its first refusal."""


async def run_many(address: str, count: int, rate_per_s: float, seed: int = 0, variant: str | None = None,
                   api_key: str = "", ca_file: str = "", workflow_timeout_s: float | None = None
                   ) -> tuple[list[WorkflowRun], list[BaseException]]:
    """``count`` workflows with Poisson arrivals at ``rate_per_s``; variants drawn uniformly unless fixed
    (``api_key``, ``ca_file``: a stack with security on; ``workflow_timeout_s``: each run's deadline from
    its start, None for none). The runs that finished and the errors of those that failed: one failure
    leaves the others to finish."""
    rng = random.Random(seed)
    async with HetflowClient(address, api_key, ca_file, refusal_attempts=RUN_REFUSAL_ATTEMPTS) as client:
        tasks = []
        for i in range(count):
            v = variant or rng.choice(list(VARIANTS))
            deadline_unix_s = time.time() + workflow_timeout_s if workflow_timeout_s else 0.0
            tasks.append(asyncio.create_task(run_code_workflow(client, TASKS[i % len(TASKS)], v,
                                                               deadline_unix_s=deadline_unix_s)))
            await asyncio.sleep(rng.expovariate(rate_per_s))
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    return ([o for o in outcomes if isinstance(o, WorkflowRun)],
            [o for o in outcomes if isinstance(o, BaseException)])
