"""Workflows as DAGs of stages, run by the client (HexGen-Flow 3.3, multi-stage dependency management).

    dag = WorkflowDag([
        Stage("link", agent="schema-linker", max_tokens=128),
        Stage("candidates", agent="sql-writer", after=("link",), fan_out=3),        # parallel calls
        Stage("fix", agent="corrector", after=("candidates",), max_rounds=3,
              until=lambda calls: "OK" in calls[-1].text),                          # a bounded loop
        Stage("judge", agent="evaluator", after=("fix",)),
    ])
    results = await run_dag(client, dag, messages_for, workflow="text-to-sql", deadline_unix_s=t + 30)

A stage's calls are sent only once every stage it depends on has finished, and the calls of a stage
(its fan-out) go out together. Each call carries the program id, its agent, the agent it follows, its
level in the DAG as ``stage_index`` of ``stage_count`` levels, and the program's deadline, which is
what the balancer's urgency and the monitor's progress read.
"""

from __future__ import annotations

import asyncio
import inspect
import time
import uuid
from dataclasses import dataclass
from typing import Awaitable, Callable, Iterable, Mapping, Protocol, Sequence

from hetflow.client import CallResult, build_request, call_timeout_s
from hetflow.core.errors import InvalidArgument
from hetflow.v1 import balancer_pb2

Messages = Sequence[tuple[str, str]]


@dataclass(frozen=True)
class Stage:
    name: str
    agent: str = ""
    """The agent that runs the stage; its name by default."""
    after: tuple[str, ...] = ()
    """Stages that must finish before this one starts."""
    max_tokens: int = 256
    fan_out: int = 1
    """Calls sent together for this stage (e.g. parallel SQL candidates)."""
    max_rounds: int = 1
    """A bounded loop: the stage runs again, up to this many rounds, until ``until`` holds."""
    until: Callable[[list[CallResult]], bool] | None = None

    @property
    def agent_name(self) -> str:
        return self.agent or self.name


class WorkflowDag:
    """Validated stages in topological order, with each stage's level (longest chain of predecessors)."""

    def __init__(self, stages: Sequence[Stage]) -> None:
        self.stages = {s.name: s for s in stages}
        _check(stages, self.stages)
        self.order = _topological(self.stages)
        self.level: dict[str, int] = {}
        for name in self.order:
            self.level[name] = 1 + max((self.level[p] for p in self.stages[name].after), default=0)

    @property
    def levels(self) -> int:
        return max(self.level.values())

    def ready(self, done: set[str], started: set[str]) -> list[Stage]:
        """Stages not yet started whose predecessors have all finished, in topological order."""
        return [self.stages[n] for n in self.order
                if n not in started and all(p in done for p in self.stages[n].after)]


def _check(stages: Sequence[Stage], by_name: Mapping[str, Stage]) -> None:
    if not stages:
        raise InvalidArgument("a workflow needs at least one stage")
    if len(by_name) != len(stages):
        dup = next(s.name for i, s in enumerate(stages) if any(t.name == s.name for t in stages[:i]))
        raise InvalidArgument(f"stage {dup!r} is defined twice")
    for s in stages:
        if not s.name:
            raise InvalidArgument("every stage needs a name")
        for ref in s.after:
            if ref not in by_name:
                raise InvalidArgument(f"stage {s.name!r} depends on unknown stage {ref!r}")
        if s.fan_out < 1 or s.max_rounds < 1 or s.max_tokens < 1:
            raise InvalidArgument(f"stage {s.name!r}: fan_out, max_rounds and max_tokens must be >= 1")
        if s.max_rounds > 1 and s.until is None:
            raise InvalidArgument(f"stage {s.name!r} loops (max_rounds {s.max_rounds}) but has no until condition")


def _topological(stages: Mapping[str, Stage]) -> list[str]:
    """Depth-first order; a cycle is an INVALID_ARGUMENT that names the stages on it."""
    order: list[str] = []
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(name: str) -> None:
        if state.get(name) == "done":
            return
        if state.get(name) == "open":
            cycle = [name] + path[path.index(name):][::-1]  # in the order the stages would run
            raise InvalidArgument(f"workflow has a cycle: {' -> '.join(cycle)}")
        state[name] = "open"
        path.append(name)
        for ref in stages[name].after:
            visit(ref)
        path.pop()
        state[name] = "done"
        order.append(name)

    for name in stages:
        visit(name)
    return order


class CompletionClient(Protocol):
    async def complete(self, request: balancer_pb2.GenerateRequest, timeout_s: float | None = None
                       ) -> CallResult: ...


MessagesFor = Callable[[Stage, int, Mapping[str, list[CallResult]]], Messages | Awaitable[Messages]]
"""(stage, call index within the fan-out, results so far by stage) -> the call's messages."""


async def run_dag(client: CompletionClient, dag: WorkflowDag, messages_for: MessagesFor, *, workflow: str,
                  program_id: str = "", deadline_unix_s: float = 0.0, tenant: str = "",
                  timeout_s: float | None = None, **request_options: object) -> dict[str, list[CallResult]]:
    """Run ``dag`` to the end: each stage as soon as its predecessors are done, its fan-out together.
    Returns every stage's calls (all rounds of a loop, in order), stages in the DAG's order. A call that
    fails cancels every call running beside it, and they end before its error is raised."""
    program_id = program_id or uuid.uuid4().hex[:16]
    results: dict[str, list[CallResult]] = {}
    done: set[str] = set()
    running: dict[asyncio.Task[list[CallResult]], str] = {}

    async def run_stage(stage: Stage) -> list[CallResult]:
        calls: list[CallResult] = []
        upstream = dag.stages[stage.after[-1]].agent_name if stage.after else ""
        for _ in range(stage.max_rounds):
            messages = [await _maybe_await(messages_for(stage, i, {**results, stage.name: calls}))
                        for i in range(stage.fan_out)]
            requests = [build_request(m, max_tokens=stage.max_tokens, program_id=program_id, workflow=workflow,
                                      agent=stage.agent_name, stage_index=dag.level[stage.name],
                                      stage_count=dag.levels, upstream_agent=upstream, tenant=tenant,
                                      deadline_unix_s=deadline_unix_s, **request_options)  # type: ignore[arg-type]
                        for m in messages]
            call_timeout = call_timeout_s(timeout_s, deadline_unix_s, time.time())
            calls += await _all_or_none(client.complete(r, call_timeout) for r in requests)
            if stage.until is None or stage.until(calls):
                break
        return calls

    try:
        while len(done) < len(dag.stages):
            for stage in dag.ready(done, set(running.values()) | done):
                running[asyncio.ensure_future(run_stage(stage))] = stage.name
            finished, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for task in finished:
                name = running.pop(task)
                results[name] = task.result()
                done.add(name)
    finally:
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)   # their calls cancelled before we return
    return {name: results[name] for name in dag.order}


async def _all_or_none(calls: Iterable[Awaitable[CallResult]]) -> list[CallResult]:
    """A fan-out's calls in order; when one fails, the others are cancelled (and awaited) before its
    error is raised, so that none runs on with nobody to read it."""
    tasks = [asyncio.ensure_future(c) for c in calls]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def _maybe_await(value: Messages | Awaitable[Messages]) -> Messages:
    return await value if inspect.isawaitable(value) else value
