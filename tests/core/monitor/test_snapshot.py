"""The one snapshot builder: each engine's last report joined with the monitor's accounting."""

from hetflow.core.monitor.memory_ledger import MemoryPlan
from hetflow.core.monitor.snapshot import cluster_snapshot
from hetflow.core.monitor.state import EngineStatus, MonitorLimits, MonitorState
from hetflow.core.snapshot import InFlightCall
from tests.factories import profile


def _state() -> MonitorState:
    state = MonitorState(MonitorLimits(engine_stale_after_s=2.0))
    state.report(EngineStatus("e0", model="m", waiting=3, running=2, kv_cache_usage=0.4,
                              profile=profile(max_num_seqs=8, kv_capacity_tokens=4096)), 0.0)
    state.report(EngineStatus("e1", model="m", profile=profile()), 0.0)
    return state


def test_a_view_is_the_report_with_the_monitors_accounting():
    state = _state()
    state.admit("r1", "p1", "m", "e0", 120.0, 0.5, predicted_cost_s=1.5, agent="coder",
                memory_plan=MemoryPlan(100, 10.0, 2.0))
    snap = cluster_snapshot(state, 1.0, program_id="p1", agent="coder")
    e0 = next(e for e in snap.engines if e.engine_id == "e0")
    assert (e0.waiting, e0.running, e0.kv_cache_usage) == (3, 2, 0.4)
    assert (e0.in_flight_tokens, e0.in_flight_requests, e0.in_flight_cost_s) == (120.0, 1, 1.5)
    assert (e0.max_batch_size, e0.kv_capacity_tokens) == (8, 4096)
    assert e0.kv_ledger_tokens == (110.0, 115.0, 120.0)  # admitted in slot 1, read in slot 2: 3 of 4 slots left
    e1 = next(e for e in snap.engines if e.engine_id == "e1")
    assert e1.kv_ledger_tokens == ()  # no packing decision used it
    assert snap.program_model == "m" and snap.program_start_s == 0.5


def test_dispatches_since_the_last_report_count_until_the_next_report():
    state = _state()
    state.admit("r1", "p1", "m", "e0", 10.0, 0.1)
    state.admit("r2", "p2", "m", "e0", 10.0, 0.2)
    assert next(e for e in cluster_snapshot(state, 0.3).engines if e.engine_id == "e0").dispatched_since_report == 2
    state.report(EngineStatus("e0", model="m", waiting=2, profile=profile()), 0.4)
    view = next(e for e in cluster_snapshot(state, 0.5).engines if e.engine_id == "e0")
    assert (view.dispatched_since_report, view.waiting, view.in_flight_requests) == (0, 2, 2)


def test_an_engine_silent_past_the_staleness_limit_is_unhealthy():
    state = _state()
    state.report(EngineStatus("e1", model="m", profile=profile()), 2.0)
    healthy = {e.engine_id: e.healthy for e in cluster_snapshot(state, 3.0).engines}
    assert healthy == {"e0": False, "e1": True}


def test_an_agent_without_statistics_has_no_distance():
    state = _state()
    state.agent_stats.anchor_distance_s["planner"] = 4.0
    assert cluster_snapshot(state, 0.0, agent="planner").agent_anchor_distance_s == 4.0
    assert cluster_snapshot(state, 0.0, agent="coder").agent_anchor_distance_s is None
    state.agent_stats.anchor_distance_s.update(coder=1.0, qa=9.0)
    assert cluster_snapshot(state, 0.0, agent="new").anchor_distance_median_s == 4.0


def test_views_are_reused_at_one_instant_while_nothing_changes_and_rebuilt_after_a_change():
    state = _state()
    first = cluster_snapshot(state, 1.0).engines
    assert cluster_snapshot(state, 1.0).engines is first                   # a round of held calls: one build
    state.admit("r1", "p1", "m", "e0", 10.0, 1.0)
    after = cluster_snapshot(state, 1.0).engines
    assert after is not first and next(e for e in after if e.engine_id == "e0").in_flight_requests == 1
    assert cluster_snapshot(state, 1.5).engines is not after                # another instant


def test_a_view_lists_the_engines_calls_in_flight_oldest_first_and_drops_a_released_one():
    state = _state()
    state.admit("r1", "p1", "m", "e0", 40.0, 0.1, prompt_tokens=300)
    state.admit("r2", "p2", "m", "e1", 10.0, 0.2, prompt_tokens=20)
    state.admit("r3", "p3", "m", "e0", 25.5, 0.3, prompt_tokens=700)
    state.admit("r4", "p4", "m", "e0", 5.0, 0.4, prompt_tokens=50)
    state.release("r3", 0.5)
    calls = {e.engine_id: e.in_flight_calls for e in cluster_snapshot(state, 0.6, in_flight_calls=True).engines}
    assert calls == {"e0": (InFlightCall(300, 40.0, 0.1), InFlightCall(50, 5.0, 0.4)),
                     "e1": (InFlightCall(20, 10.0, 0.2),)}


def test_views_are_built_once_an_instant_and_again_after_a_change_with_or_without_calls():
    state = _state()
    state.admit("r1", "p1", "m", "e0", 10.0, 0.1, prompt_tokens=50)
    with_calls = cluster_snapshot(state, 0.3, in_flight_calls=True).engines
    assert cluster_snapshot(state, 0.3, in_flight_calls=True).engines is with_calls  # nothing changed
    assert cluster_snapshot(state, 0.3).engines[0].in_flight_calls == ()  # not asked for: not given
    state.admit("r2", "p2", "m", "e0", 20.0, 0.3, prompt_tokens=70)
    e0 = cluster_snapshot(state, 0.3, in_flight_calls=True).engines[0]
    assert [c.prompt_tokens for c in e0.in_flight_calls] == [50, 70]


def test_a_call_without_stages_is_placed_in_its_run_and_counted_from_finished_runs():
    """Kairos 4.2 online: runs are learned when they end (a final stage finished) or go idle, and a call
    that names neither stage field gets its position in its run and its workflow's count."""
    state = _state()
    state.admit("a1", "named", "m", "e0", 10.0, 1.0, workflow="code", agent="planner", stage_index=1, stage_count=2)
    state.release("a1", 2.0)
    state.admit("a2", "named", "m", "e0", 10.0, 2.0, workflow="code", agent="coder", upstream_agent="planner",
                stage_index=2, stage_count=2)
    state.release("a2", 3.0)                                    # its final stage: learned now
    assert state.workflow_stages.infer("code", "planner", 1).runs_seen == 1
    state.admit("b1", "bare", "m", "e0", 10.0, 4.0, workflow="code", agent="planner")
    state.release("b1", 5.0)
    state.admit("b2", "bare", "m", "e0", 10.0, 5.0, workflow="code", agent="coder", upstream_agent="planner")
    snap = cluster_snapshot(state, 5.5, "bare", "coder", "code", upstream_agent="planner")
    assert snap.inferred_stages.stage_index == 2                # b2 still runs: a sibling joins its stage
    assert (snap.inferred_stages.stage_count, snap.inferred_stages.runs_seen) == (2, 1)
    assert cluster_snapshot(state, 5.5, "bare", "coder", "code", 2, 2).inferred_stages is None  # named: kept
    state.release("b2", 6.0)
    state.sweep(6.0 + state.limits.program_idle_after_s + 1)   # idle: learned once, as it stands
    state.sweep(6.0 + state.limits.program_idle_after_s + 2)
    assert state.workflow_stages.infer("code", "planner", 1).runs_seen == 2


def test_an_inferred_last_stage_does_not_end_its_program_and_one_call_programs_teach_nothing():
    state = _state()
    state.admit("x1", "single", "m", "e0", 10.0, 1.0, workflow="w", stage_index=1, stage_count=1, one_call=True)
    state.release("x1", 2.0)
    state.admit("i1", "inferred", "m", "e0", 10.0, 1.0, workflow="w", agent="a", stage_index=1, stage_count=1,
                stages_inferred=True)
    state.release("i1", 2.0)
    assert not state.programs["inferred"].ended and state.programs["single"].ended
    assert state.workflow_stages.infer("w", "a", 1).runs_seen == 0        # neither taught anything yet
    state.sweep(2.0 + state.limits.program_idle_after_s + 1)              # idle: the inferred one is learned
    assert state.workflow_stages.infer("w", "a", 1).runs_seen == 1
    state.report(EngineStatus("e0", model="m", profile=profile()), 40.0)
    state.admit("i2", "inferred", "m", "e0", 10.0, 40.0, workflow="w", agent="a", stages_inferred=True)
    assert state.workflow_stages.infer("w", "a", 1).runs_seen == 0        # it came back: forgotten until it ends
