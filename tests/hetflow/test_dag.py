"""Workflow DAGs: validation names the bad stage, stages start only after their predecessors finish,
a fan-out goes out together, loops stop at their condition or their bound."""

import asyncio
import collections
import time

import pytest

from hetflow.client import CallResult
from hetflow.core.errors import InvalidArgument
from hetflow.dag import Stage, WorkflowDag, run_dag


class RecordingClient:
    """Answers every call after a delay that depends on its agent, and logs starts and ends in order;
    ``ends_after_start``: an agent whose calls end only once another agent's first call has started (at
    most 30 s, then the call fails), whatever the host's speed."""

    def __init__(self, delays_s: dict[str, float], ends_after_start: dict[str, str] | None = None) -> None:
        self.delays_s, self.events, self.requests, self.timeouts_s = delays_s, [], [], []
        self.ends_after_start = ends_after_start or {}
        self.started: collections.defaultdict[str, asyncio.Event] = collections.defaultdict(asyncio.Event)

    async def complete(self, request, timeout_s=None) -> CallResult:
        agent = request.workflow.agent
        self.requests.append(request)
        self.timeouts_s.append(timeout_s)
        self.events.append(("start", agent))
        self.started[agent].set()
        await asyncio.sleep(self.delays_s.get(agent, 0.0))
        if agent in self.ends_after_start:
            await asyncio.wait_for(self.started[self.ends_after_start[agent]].wait(), 30.0)
        self.events.append(("end", agent))
        text = "OK" if sum(1 for e in self.events if e == ("end", agent)) >= 2 else "retry"
        return CallResult(request.request_id, text, "stop", 1, 1, "m", "e", 0.0)


def sql_dag(**fix) -> WorkflowDag:
    return WorkflowDag([
        Stage("link", max_tokens=16),
        Stage("candidates", after=("link",), fan_out=3),
        Stage("explain", after=("link",)),
        Stage("fix", after=("candidates",), **fix),
        Stage("judge", after=("fix", "explain")),
    ])


def test_unknown_reference_and_cycle_are_invalid_and_named():
    with pytest.raises(InvalidArgument, match="'b' depends on unknown stage 'nope'"):
        WorkflowDag([Stage("a"), Stage("b", after=("nope",))])
    with pytest.raises(InvalidArgument, match="cycle: (a -> b -> c -> a|b -> c -> a -> b|c -> a -> b -> c)"):
        WorkflowDag([Stage("a", after=("c",)), Stage("b", after=("a",)), Stage("c", after=("b",))])
    with pytest.raises(InvalidArgument, match="'a' is defined twice"):
        WorkflowDag([Stage("a"), Stage("a")])
    with pytest.raises(InvalidArgument, match="no until"):
        WorkflowDag([Stage("a", max_rounds=3)])


def test_levels_are_the_longest_chain_of_predecessors():
    dag = sql_dag()
    assert dag.level == {"link": 1, "candidates": 2, "explain": 2, "fix": 3, "judge": 4} and dag.levels == 4


def test_stages_wait_for_predecessors_and_fan_out_goes_out_together():
    client = RecordingClient({"link": 0.02, "candidates": 0.01, "fix": 0.01}, ends_after_start={"explain": "fix"})
    dag = sql_dag()
    deadline_unix_s = time.time() + 600.0
    results = asyncio.run(run_dag(client, dag, lambda s, i, r: [("user", f"{s.name} {i}")], workflow="sql",
                                  program_id="p1", deadline_unix_s=deadline_unix_s, timeout_s=900.0))
    events = client.events
    for name, stage in dag.stages.items():
        first_start = events.index(("start", name))
        for pred in stage.after:
            last_end = max(i for i, e in enumerate(events) if e == ("end", pred))
            assert last_end < first_start, f"{name} started before {pred} finished"
    starts = [i for i, e in enumerate(events) if e == ("start", "candidates")]
    first_end = events.index(("end", "candidates"))
    assert len(starts) == 3 and max(starts) < first_end
    assert events.index(("start", "fix")) < events.index(("end", "explain"))   # fix did not wait for explain
    assert {len(v) for v in results.values()} == {1, 3}
    req = next(r for r in client.requests if r.workflow.agent == "judge")
    assert (req.workflow.program_id, req.workflow.stage_index, req.workflow.stage_count) == ("p1", 4, 4)
    assert req.workflow.upstream_agent == "explain" and req.workflow.deadline_unix_s == deadline_unix_s
    assert all(0 < t <= 600.0 for t in client.timeouts_s)   # each call's 900 s cut to the run's deadline


def test_a_run_whose_deadline_passed_sends_nothing_and_fails_as_the_servers_would():
    import grpc

    client = RecordingClient({})
    with pytest.raises(grpc.aio.AioRpcError) as late:
        asyncio.run(run_dag(client, sql_dag(), lambda s, i, r: [("user", "x")], workflow="sql",
                            deadline_unix_s=time.time() - 1.0))
    assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED and client.requests == []


def test_loop_stops_at_its_condition_or_its_bound():
    until_ok = sql_dag(max_rounds=5, until=lambda calls: calls[-1].text == "OK")
    results = asyncio.run(run_dag(RecordingClient({}), until_ok, lambda s, i, r: [("user", "x")], workflow="sql"))
    assert len(results["fix"]) == 2
    never = sql_dag(max_rounds=3, until=lambda calls: False)
    results = asyncio.run(run_dag(RecordingClient({}), never, lambda s, i, r: [("user", "x")], workflow="sql"))
    assert len(results["fix"]) == 3


class FailingClient:
    """After ``link``, the call started ``fails_at``-th raises at once (they start in the DAG's order: the
    three candidates, then explain); every other call waits until cancelled, and says so."""

    def __init__(self, fails_at: int) -> None:
        self.fails_at, self.started, self.cancelled = fails_at, 0, []

    async def complete(self, request, timeout_s=None) -> CallResult:
        agent = request.workflow.agent
        if agent == "link":
            return CallResult(request.request_id, "ok", "stop", 1, 1, "m", "e", 0.0)
        self.started += 1
        if self.started == self.fails_at:
            raise RuntimeError("engine failed")
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.append(agent)
            raise
        raise AssertionError("unreachable")


def _cancelled_when_it_raised(client: FailingClient) -> list[str]:
    """The calls cancelled by the time ``run_dag`` raised (not by ``asyncio.run``'s clean-up after)."""
    async def run() -> list[str]:
        with pytest.raises(RuntimeError, match="engine failed"):
            await run_dag(client, sql_dag(), lambda s, i, r: [("user", "x")], workflow="sql")
        return sorted(client.cancelled)
    return asyncio.run(run())


def test_a_failed_call_cancels_the_calls_running_beside_it_before_the_run_raises():
    assert _cancelled_when_it_raised(FailingClient(fails_at=4)) == ["candidates"] * 3   # explain failed
    # the third candidate failed: its fan-out and the stage beside it
    assert _cancelled_when_it_raised(FailingClient(fails_at=3)) == ["candidates", "candidates", "explain"]


def test_results_come_in_the_dags_order_whatever_finishes_first():
    client = RecordingClient({"explain": 0.0, "candidates": 0.01})
    results = asyncio.run(run_dag(client, sql_dag(), lambda s, i, r: [("user", "x")], workflow="sql"))
    assert list(results) == list(sql_dag().order)
