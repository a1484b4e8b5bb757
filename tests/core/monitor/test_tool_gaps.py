"""Each agent's tool gaps, learned by the monitor from its first on (issue 35)."""

import math

import pytest

from hetflow.core.monitor.state import EngineStatus, MonitorLimits, MonitorState
from hetflow.core.monitor.tool_gaps import ToolGaps
from tests.factories import profile


def monitor() -> MonitorState:
    state = MonitorState(MonitorLimits())
    state.report(EngineStatus("e0", model="m", profile=profile()), 0.0)
    return state


def test_a_program_back_from_a_tool_call_records_the_gap_under_the_agent_that_finished():
    state = monitor()
    state.admit("p/1", "p", "m", "e0", 8.0, 0.0, workflow="w", agent="coder", stage_index=1, stage_count=3)
    state.release("p/1", 2.0)
    state.admit("p/2", "p", "m", "e0", 8.0, 6.0, workflow="w", agent="tester", stage_index=2, stage_count=3)
    fit = state.tool_gaps.fit("w", "coder")
    assert fit is not None and fit.samples == 1 and fit.mu == pytest.approx(math.log(4.0))
    assert state.tool_gaps.fit("w", "tester") is None


def test_no_gap_while_another_call_of_the_program_runs_nor_after_its_last_stage():
    state = monitor()
    state.admit("p/a", "p", "m", "e0", 8.0, 0.0, workflow="w", agent="a", stage_index=1, stage_count=2)
    state.admit("p/b", "p", "m", "e0", 8.0, 0.0, workflow="w", agent="b", stage_index=1, stage_count=2)
    state.release("p/a", 1.0)
    state.admit("p/c", "p", "m", "e0", 8.0, 2.0, workflow="w", agent="c", stage_index=2, stage_count=2)
    assert state.tool_gaps.fit("w", "a") is None          # p/b was still in flight: no tool call
    state.release("p/b", 3.0)
    state.release("p/c", 4.0)                              # the last stage: the program ends
    state.admit("q/1", "p", "m", "e0", 8.0, 9.0, workflow="w", agent="c", stage_index=1, stage_count=2)
    assert state.tool_gaps.fit("w", "c") is None


def test_the_fit_is_over_the_last_window_of_gaps():
    gaps = ToolGaps(window=2)
    for gap_s in (100.0, 1.0, 4.0):
        gaps.record("w", "a", gap_s)
    fit = gaps.fit("w", "a")
    assert fit.samples == 2 and fit.mu == pytest.approx(math.log(2.0)) and fit.sigma == pytest.approx(math.log(2.0))
    gaps.record("w", "a", 0.0)                             # not a gap
    gaps.record("w", "", 3.0)                              # no agent: teaches nothing
    assert gaps.fit("w", "a").samples == 2 and gaps.fit("w", "") is None


def test_past_its_bound_the_agent_heard_from_least_recently_is_forgotten(monkeypatch):
    """A framework that names an agent per thread would grow the gaps without end."""
    from hetflow.core.monitor import tool_gaps

    monkeypatch.setattr(tool_gaps, "MAX_AGENTS", 2)
    gaps = ToolGaps()
    for agent in ("planner", "thread-1", "planner", "thread-2"):
        gaps.record("w", agent, 3.0)
    assert gaps.fit("w", "thread-1") is None and gaps.fit("w", "planner").samples == 2
    assert gaps.fit("w", "thread-2").samples == 1


def test_agents_merely_asked_about_are_not_remembered():
    """Every snapshot asks for each running agent's fit: one without gaps leaves nothing behind."""
    gaps = ToolGaps()
    for i in range(1000):
        assert gaps.fit("w", f"agent-{i}") is None
    gaps.record("w", "a", 2.0)
    assert gaps.fit("w", "a") is not None and len(gaps._fits) == 1
