"""Kairos 4.2: a run's stages rebuilt from upstream names and execution timestamps alone (figure 11's
patterns), and the stage position and count a call that names neither is given."""

from hetflow.core.call import StageInference
from hetflow.core.monitor import workflow_graph
from hetflow.core.monitor.spans import CallSpan
from hetflow.core.monitor.workflow_graph import RunSoFar, WorkflowStages, position_in_run, run_stages


def spans(*calls: tuple[str, str, float, float], run: str = "m") -> list[CallSpan]:
    return [CallSpan(run, agent, upstream, start, end) for agent, upstream, start, end in calls]


def agents(stages: list[list[CallSpan]]) -> list[list[str]]:
    return [sorted(s.agent for s in stage) for stage in stages]


def test_parallel_fan_out_is_one_stage():                # figure 11 (a): A calls B, C, D at once
    run = spans(("A", "", 0, 1), ("B", "A", 1, 4), ("C", "A", 1, 3), ("D", "A", 1.1, 5))
    assert agents(run_stages(run)) == [["A"], ["B", "C", "D"]]


def test_sequential_fan_out_is_three_stages():          # figure 11 (c): A calls B, then C, then D
    run = spans(("A", "", 0, 1), ("B", "A", 1, 2), ("C", "A", 2, 3), ("D", "A", 3, 4))
    assert agents(run_stages(run)) == [["A"], ["B"], ["C"], ["D"]]


def test_mixed_groups_found_by_the_sweep_line():         # figure 11 (b)/(d): two in parallel, then one
    run = spans(("A", "", 0, 1), ("B", "A", 1, 3), ("C", "A", 1.5, 2.5), ("D", "A", 3.2, 4), ("E", "D", 4, 5))
    assert agents(run_stages(run)) == [["A"], ["B", "C"], ["D"], ["E"]]


def test_overlap_without_a_shared_upstream_is_not_parallel():
    """A call that starts while another runs but comes from a different agent is the next stage: timestamps
    alone would merge them."""
    run = spans(("A", "", 0, 1), ("B", "A", 1, 3), ("C", "B", 2, 4))
    assert agents(run_stages(run)) == [["A"], ["B"], ["C"]]


def test_a_tool_loop_counts_each_call_of_a_repeated_agent():
    run = spans(("planner", "", 0, 1), ("coder", "planner", 1, 2), ("qa", "coder", 2, 3), ("coder", "qa", 3, 4))
    assert agents(run_stages(run)) == [["planner"], ["coder"], ["qa"], ["coder"]]


def test_a_call_joins_its_running_siblings_and_follows_finished_ones():
    running = spans(("A", "", 0, 1), ("B", "A", 1, float("inf")))
    assert position_in_run(running, "C", "A", 1.5) == 2       # B still runs, same upstream: parallel
    assert position_in_run(running, "E", "B", 1.5) == 3       # downstream of B: after it
    finished = spans(("A", "", 0, 1), ("B", "A", 1, 2))
    assert position_in_run(finished, "C", "A", 2.5) == 3      # B is done: the next stage
    assert position_in_run([], "A", "", 0.0) == 1


def run_of(*calls: tuple[str, str, float, float]) -> RunSoFar:
    run = RunSoFar()
    for span in spans(*calls):
        run.add(span)
    return run


def test_counts_come_from_finished_runs_of_the_workflow():
    stages = WorkflowStages()
    assert stages.infer("code", "planner", 1) == StageInference(1, 0, 0)       # nothing seen yet
    stages.record_run("code", run_of(("planner", "", 0, 1), ("coder", "planner", 1, 2), ("qa", "coder", 2, 3)))
    stages.record_run("code", run_of(("planner", "", 0, 1), ("coder", "planner", 1, 2), ("qa", "coder", 2, 3),
                                     ("coder", "qa", 3, 4), ("qa", "coder", 4, 5)))
    assert stages.infer("code", "planner", 1) == StageInference(1, 4, 2)        # median of 2 and 4 stages after
    assert stages.infer("code", "qa", 3) == StageInference(3, 3, 2)             # qa was last or two before
    assert stages.infer("code", "reviewer", 2) == StageInference(2, 4, 2)       # unseen agent: the median run
    assert stages.infer("sql", "planner", 1) == StageInference(1, 0, 0)         # another workflow learns apart


def test_a_run_that_comes_back_is_forgotten_and_halves_round_up():
    stages = WorkflowStages()
    short = stages.record_run("w", run_of(("lead", "", 0, 1), ("reviewer", "", 1, 2)))
    assert stages.infer("w", "reviewer", 2) == StageInference(2, 2, 1)
    stages.forget("w", short)                                                    # it came back
    assert stages.infer("w", "reviewer", 2) == StageInference(2, 0, 0)
    stages.record_run("w", run_of(("lead", "", 0, 1), ("reviewer", "", 1, 2), ("reviewer", "", 2, 3)))
    assert stages.infer("w", "reviewer", 2) == StageInference(2, 3, 1)          # median of 1 and 0 is 1, not 0


def test_a_long_run_keeps_a_window_and_counts_the_stages_before_it(monkeypatch):
    monkeypatch.setattr(workflow_graph, "RUN_WINDOW_CALLS", 4)
    run = run_of(*((f"a{i}", "", float(i), i + 0.5) for i in range(10)))
    assert run.calls == 10 and len(run.spans) <= 4
    assert run.position_of([], "next", "", 11.0) == 11
    assert WorkflowStages().record_run("w", run).stage_count == 10


def test_agents_past_the_bound_are_forgotten_least_recent_first(monkeypatch):
    monkeypatch.setattr(workflow_graph, "MAX_AGENTS", 2)
    stages = WorkflowStages()
    for agent in ("a", "b", "c"):
        stages.record_run("w", run_of((agent, "", 0, 1)))
    assert len(stages.stages_after) == 2 and ("w", "a") not in stages.stages_after
