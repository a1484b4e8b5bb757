"""Chimera 3.5 accounting: no entry survives completion, cancellation, engine failure or orphaning."""

import pytest

from hetflow.core.monitor.memory_ledger import MemoryPlan
from hetflow.core.monitor.snapshot import engine_views
from hetflow.core.monitor.state import EngineStatus, MonitorLimits, MonitorState


def status(engine_id="e0", active=(), serving=True):
    return EngineStatus(engine_id=engine_id, model="m", serving=serving, active_request_ids=tuple(active))


@pytest.fixture
def state():
    s = MonitorState(MonitorLimits(engine_stale_after_s=2, engine_failed_after_s=10, orphan_grace_s=5,
                                   program_ttl_s=60))
    s.report(status("e0"), now_s=0)
    s.report(status("e1"), now_s=0)
    return s


def test_admit_adds_tokens_and_assigns_program(state):
    program = state.admit("r1", "p1", "m", "e0", 120.0, now_s=1)
    state.admit("r2", "p1", "other", "e1", 30.0, now_s=1)
    assert state.engines["e0"].in_flight_tokens == 120 and state.engines["e1"].in_flight_tokens == 30
    assert program.model == "m" and state.program_model("p1") == "m"   # A[p] is set once
    assert state.admit_seq == 2


@pytest.mark.parametrize("completed", [True, False])
def test_release_removes_entry(state, completed):
    state.admit("r1", "p1", "m", "e0", 120.0, now_s=1)
    assert state.release("r1", now_s=2, output_tokens=50, completed=completed)
    assert not state.entries and state.engines["e0"].in_flight_tokens == 0 and not state.engines["e0"].in_flight
    assert state.programs["p1"].completed == int(completed)
    assert not state.release("r1", now_s=3)  # idempotent


def test_a_start_past_now_gives_no_negative_service(state):
    """A Hold's caller names the call's start; one in the future would make the program's attained service
    negative and put it first (``attained_service``), so the start is bounded by now."""
    state.admit("r1", "p1", "m", "e0", 10.0, now_s=1)
    state.release("r1", now_s=5, output_tokens=10, started_s=1e9)
    assert state.programs["p1"].service_s == 0.0
    state.admit("r2", "p1", "m", "e0", 10.0, now_s=6)
    state.release("r2", now_s=8, output_tokens=10, started_s=7.0)
    assert state.programs["p1"].service_s == 1.0   # a start in range stands


def test_duplicate_and_unknown_engine_are_rejected(state):
    state.admit("r1", "p1", "m", "e0", 1.0, now_s=1)
    with pytest.raises(ValueError):
        state.admit("r1", "p1", "m", "e0", 1.0, now_s=1)
    with pytest.raises(KeyError):
        state.admit("r2", "p1", "m", "nope", 1.0, now_s=1)


def test_a_failed_engine_keeps_running_calls_until_released_and_is_then_forgotten(state):
    state.admit("r1", "p1", "m", "e0", 10.0, now_s=1)
    state.admit("r2", "p2", "m", "e1", 10.0, now_s=1)
    state.report(status("e1", active=["r2"]), now_s=9)      # e1 keeps reporting, e0 goes silent
    assert not state.is_healthy(state.engines["e0"], 3)
    state.sweep(now_s=11)
    assert "r1" in state.entries and "e0" in state.engines  # its balancer may still be streaming it
    state.release("r1", now_s=12, completed=False)
    state.sweep(now_s=13)
    assert "e0" not in state.engines and "r2" in state.entries


def test_entries_of_an_engine_silent_past_the_lost_limit_are_dropped():
    state = MonitorState(MonitorLimits(engine_failed_after_s=10, lost_entries_after_s=100))
    state.report(status("e0"), now_s=0)
    state.admit("r1", "p1", "m", "e0", 10.0, now_s=1)
    assert state.sweep(now_s=50)["entries_dropped"] == 0
    assert state.sweep(now_s=101)["entries_dropped"] == 1
    assert not state.entries and "e0" not in state.engines


def test_an_unreachable_engine_is_unhealthy_until_it_reports_again(state):
    assert state.engine_unreachable("e0", "UNAVAILABLE: connection refused")
    assert not state.is_healthy(state.engines["e0"], 1) and state.is_healthy(state.engines["e1"], 1)
    state.report(status("e0"), now_s=1.5)
    assert state.is_healthy(state.engines["e0"], 2)
    assert not state.engine_unreachable("nope", "")


def test_a_reregistered_call_already_known_is_left_as_it_is(state):
    state.admit("r1", "p1", "m", "e0", 10.0, now_s=1)
    program = state.admit("r1", "p1", "m", "e0", 10.0, now_s=2, reregister=True)
    assert program.program_id == "p1" and state.engines["e0"].in_flight_tokens == 10 and state.admit_seq == 1


def test_orphans_are_reconciled_from_engine_reports(state):
    state.admit("r1", "p1", "m", "e0", 10.0, now_s=1)
    state.admit("r2", "p1", "m", "e0", 10.0, now_s=1)
    assert state.report(status("e0", active=["r2"]), now_s=3) == 0   # missing since 3: within grace, kept
    assert state.report(status("e0", active=["r2"]), now_s=7) == 0
    assert state.report(status("e0", active=["r2"]), now_s=9) == 1   # missing past grace: removed
    assert set(state.entries) == {"r2"}


def test_a_long_call_that_finished_keeps_its_entry_for_its_release_past_the_grace_from_its_admit(state):
    """The engine drops a finished call from its reports before its release arrives (through the balancer):
    the grace runs from its leaving the reports, not from its admit, so its completion is not lost."""
    state.admit("r1", "p1", "m", "e0", 10.0, now_s=1)
    assert state.report(status("e0", active=["r1"]), now_s=30) == 0   # running long past the grace
    assert state.report(status("e0"), now_s=30.5) == 0                 # finished: gone from the report
    assert state.release("r1", now_s=31, output_tokens=40)            # its release: found, completed
    assert state.programs["p1"].completed == 1 and state.programs["p1"].output_tokens == 40


def test_a_gateway_call_its_engine_cannot_report_is_kept_until_the_gateway_entry_limit():
    """A call sent by a gateway to the model server itself is never in its engine's reports: past the
    orphan grace it stays (its balancer releases it as its response ends), but not for ever when that
    balancer is gone."""
    state = MonitorState(MonitorLimits(orphan_grace_s=5, gateway_entry_max_s=100))
    state.report(status("e0"), now_s=0)
    state.admit("r1", "p1", "m", "e0", 10.0, now_s=1, via_gateway=True)
    assert state.report(status("e0"), now_s=50) == 0 and "r1" in state.entries
    assert state.report(status("e0"), now_s=102) == 1 and not state.entries
    assert state.engines["e0"].in_flight_tokens == 0 and not state.programs["p1"].in_flight


def test_idle_programs_are_forgotten(state):
    state.admit("r1", "p1", "m", "e0", 10.0, now_s=1)
    state.release("r1", now_s=2)
    state.report(status("e0"), now_s=70)
    state.report(status("e1"), now_s=70)
    state.sweep(now_s=70)
    assert "p1" not in state.programs


def test_in_flight_cost_is_summed_per_engine_and_released(state):
    state.admit("r1", "p1", "m", "e0", 100.0, 1.0, predicted_cost_s=2.5)
    state.admit("r2", "p2", "m", "e0", 50.0, 1.0, predicted_cost_s=1.0)
    assert state.engines["e0"].in_flight_cost_s == pytest.approx(3.5)   # t_queue, HexGen-Flow eq. 3
    state.release("r1", 2.0)
    assert state.engines["e0"].in_flight_cost_s == pytest.approx(1.0)
    state.release("r2", 2.0)
    assert state.engines["e0"].in_flight_cost_s == 0.0
    with pytest.raises(ValueError):
        state.admit("r3", "p3", "m", "e0", 1.0, 3.0, predicted_cost_s=-1.0)


def test_an_engine_reporting_new_preemptions_is_suspended_until_a_clean_report(state):
    state.report(EngineStatus(engine_id="e0", model="m", serving=True, preemptions_total=3), 1.0)
    assert state.engines["e0"].suspended
    state.report(EngineStatus(engine_id="e0", model="m", serving=True, preemptions_total=3), 1.5)
    assert not state.engines["e0"].suspended


def test_resident_tokens_follow_a_programs_last_engine_until_it_goes_idle(state):
    state.admit("r1", "p1", "m", "e0", 10.0, now_s=0, prompt_tokens=500)
    state.admit("r2", "p2", "m", "e0", 10.0, now_s=0, prompt_tokens=300)
    assert tokens(state, "e0", 0) == 800
    state.release("r1", now_s=1, output_tokens=40)               # its context grows by its output
    assert tokens(state, "e0", 1) == 840
    state.admit("r3", "p1", "m", "e1", 10.0, now_s=2, prompt_tokens=600)  # p1 moves to e1
    assert tokens(state, "e0", 2) == 300
    assert tokens(state, "e1", 2) == 600
    state.release("r2", now_s=3)
    idle_after = state.limits.program_idle_after_s
    assert tokens(state, "e0", 3 + idle_after) == 300   # within its tool gap
    assert tokens(state, "e0", 3.1 + idle_after) == 0   # idle: dropped
    assert tokens(state, "e1", 1000) == 600             # still in flight


def tokens(state, engine_id, now_s):
    return state.resident(state.engines[engine_id], now_s).tokens


def test_a_program_given_a_kv_hold_stays_resident_until_the_hold_ends_not_for_the_idle_time(state):
    state.admit("r1", "held", "m", "e0", 10.0, now_s=0, prompt_tokens=500, retain_kv_s=4.0)
    state.admit("r2", "not-worth", "m", "e0", 10.0, now_s=0, prompt_tokens=300, retain_kv_s=0.0)
    state.release("r1", now_s=1, output_tokens=20)
    state.release("r2", now_s=1, output_tokens=20)
    assert tokens(state, "e0", 1) == 840     # both holds start now
    assert tokens(state, "e0", 1.01) == 520  # a hold of 0 ends at once
    assert tokens(state, "e0", 5) == 520     # within its 4 s hold
    assert tokens(state, "e0", 5.01) == 0    # well before the idle time
    assert state.limits.program_idle_after_s > 5


@pytest.mark.parametrize("hold_s", [-1.0, float("nan"), float("inf")])
def test_a_kv_hold_that_is_not_a_time_is_refused(state, hold_s):
    with pytest.raises(ValueError, match="retain_kv_s"):
        state.admit("r1", "p1", "m", "e0", 10.0, now_s=1, retain_kv_s=hold_s)
    assert not state.entries


@pytest.mark.parametrize("field, value", [("predicted_tokens", -1.0), ("predicted_tokens", 1e12),
                                          ("prompt_tokens", 10**9), ("mean_cost_s", 1e9)])
def test_absurd_admits_are_refused(state, field, value):
    kwargs = {"predicted_tokens": 10.0, field: value}
    with pytest.raises(ValueError, match=field):
        state.admit("r1", "p1", "m", "e0", now_s=1, **kwargs)
    assert not state.entries


@pytest.mark.parametrize("plan", [MemoryPlan(10, 20.0, 1e12), MemoryPlan(10, 1e9, 2.0)])
def test_an_absurd_memory_plan_is_refused_before_it_reaches_the_ledger(state, plan):
    with pytest.raises(ValueError, match="expected_s|decode_tokens_per_s"):
        state.admit("r1", "p1", "m", "e0", 10.0, now_s=1, memory_plan=plan)


def test_an_absurd_report_is_refused_and_leaves_the_engine_as_it_was(state):
    with pytest.raises(ValueError, match="kv_cache_usage"):
        state.report(EngineStatus(engine_id="e0", model="m", kv_cache_usage=7.0), now_s=1)
    assert state.engines["e0"].status.kv_cache_usage == 0.0 and state.engines["e0"].received_s == 0


def test_a_program_whose_last_stage_finished_holds_no_context_on_its_engine(state):
    state.admit("r1", "one-call", "m", "e0", 10.0, now_s=1, prompt_tokens=500, stage_index=1, stage_count=1)
    state.admit("r2", "two-stage", "m", "e0", 10.0, now_s=1, prompt_tokens=300, stage_index=1, stage_count=2)
    assert tokens(state, "e0", 1) == 800
    state.release("r1", now_s=2, output_tokens=20)
    state.release("r2", now_s=2, output_tokens=20)
    assert tokens(state, "e0", 2.1) == 320  # the one-call program ended


@pytest.mark.parametrize("engine_id, model", [("", "m"), ("e9", ""), ("e9", "  ")])
def test_a_report_that_names_no_engine_or_no_model_is_refused(engine_id, model):
    """The fuzzer's find: a report with model "" registered an engine that later broke every decision."""
    from hetflow.core.monitor.state import check_status

    with pytest.raises(ValueError, match="engine_id and the model"):
        check_status(EngineStatus(engine_id=engine_id, model=model, serving=True))
    check_status(EngineStatus(engine_id="e9", model="m", serving=True))


def test_snapshots_count_the_active_programs_whose_last_call_went_to_each_engine(state):
    state.report(status("e0"), 0.0)
    state.report(status("e1"), 0.0)
    state.admit("r1", "p1", "m", "e0", 10.0, now_s=0, prompt_tokens=500)
    state.admit("r2", "p2", "m", "e0", 10.0, now_s=0, prompt_tokens=300)
    state.admit("r3", "p3", "m", "e1", 10.0, now_s=0, prompt_tokens=300)
    assert {v.engine_id: v.resident_programs for v in engine_views(state, 0.0)} == {"e0": 2, "e1": 1}
    state.release("r2", now_s=1)
    idle = 1.1 + state.limits.program_idle_after_s
    assert {v.engine_id: v.resident_programs for v in engine_views(state, idle)} == {"e0": 1, "e1": 1}


def test_a_program_that_told_its_stages_stays_resident_past_its_hold_while_stages_are_left(state):
    """Its next call brings its context back whether or not its KV was held; its last stage ends it."""
    state.admit("r1", "told", "m", "e0", 10.0, now_s=0, prompt_tokens=500, retain_kv_s=0.0,
                stage_index=1, stage_count=3)
    state.admit("r2", "untold", "m", "e0", 10.0, now_s=0, prompt_tokens=300, retain_kv_s=0.0)
    state.release("r1", now_s=1, output_tokens=20)
    state.release("r2", now_s=1, output_tokens=20)
    idle_after = state.limits.program_idle_after_s
    assert tokens(state, "e0", 1.01) == 520                        # the untold one's hold of 0 ended
    assert tokens(state, "e0", 1 + idle_after) == 520
    assert tokens(state, "e0", 1.01 + idle_after) == 0               # idle: dropped all the same
    state.admit("r3", "told", "m", "e0", 10.0, now_s=50, prompt_tokens=600, stage_index=3, stage_count=3)
    state.release("r3", now_s=51, output_tokens=10)
    assert tokens(state, "e0", 51) == 0                              # its last stage ended it


def test_a_last_stage_that_failed_leaves_its_program_open_for_the_retry(state):
    """A failed last stage is tried again, as a rule (the client keeps its index): its program is neither
    ended nor learned one stage short, and its context stays resident for the retry."""
    state.admit("r1", "p", "m", "e0", 10.0, now_s=0, prompt_tokens=500, stage_index=2, stage_count=2)
    state.release("r1", now_s=1, completed=False)
    assert not state.programs["p"].ended and tokens(state, "e0", 1.01) == 500
    state.admit("r2", "p", "m", "e0", 10.0, now_s=2, prompt_tokens=500, stage_index=2, stage_count=2)
    state.release("r2", now_s=3, output_tokens=10)
    assert state.programs["p"].ended


def test_resident_growth_counts_each_programs_calls_to_come_at_its_growth_per_call(state):
    """Before its second call a program grows as its workflow's earlier programs did; after, as it did."""
    state.admit("a1", "early", "m", "e1", 10.0, now_s=0, workflow="w", prompt_tokens=1000, stage_index=1, stage_count=4)
    state.release("a1", now_s=1, output_tokens=100)
    state.admit("a2", "early", "m", "e1", 10.0, now_s=2, workflow="w", prompt_tokens=1400, stage_index=2, stage_count=4)
    assert state.context_growth.tokens_per_call("w") == 400
    state.admit("b1", "new", "m", "e0", 10.0, now_s=3, workflow="w", prompt_tokens=800, stage_index=1, stage_count=5)
    state.admit("c1", "untold", "m", "e0", 10.0, now_s=3, workflow="w", prompt_tokens=700)
    resident = state.resident(state.engines["e0"], now_s=3)
    assert (resident.tokens, resident.growth_tokens, resident.programs) == (1500, 4 * 400, 2)  # untold: no growth
    state.release("a2", now_s=4, output_tokens=100)                  # its own: (1500 - 1000) per call, 2 to come
    assert state.resident(state.engines["e1"], now_s=4).growth_tokens == 2 * 500


def test_a_later_call_that_does_not_tell_its_stages_keeps_the_count_its_program_told(state):
    state.admit("r1", "p", "m", "e0", 10.0, now_s=0, prompt_tokens=500, stage_index=1, stage_count=4)
    state.admit("r2", "p", "m", "e0", 10.0, now_s=1, prompt_tokens=700)
    assert state.programs["p"].stage_count == 4
    state.admit("r3", "p", "m", "e0", 10.0, now_s=2, prompt_tokens=900, stages_inferred=True)
    assert state.programs["p"].stage_count == 0                      # inferred stages end nothing


def test_calls_so_far_are_counted_by_stage_so_a_retried_stage_or_a_judge_counts_once(state):
    """A stage decided again (its call failed before its first token), a cascade's escalation or its judge's
    call is another dispatch of a stage already reached: neither shortens the stages to come nor enters the
    workflow's growth, which is learned prompt to prompt between stages."""
    state.admit("s1", "p", "m", "e0", 10.0, now_s=0, workflow="w", prompt_tokens=1000, stage_index=1, stage_count=5)
    state.release("s1", now_s=0.1, completed=False)
    state.admit("s1-again", "p", "m", "e0", 10.0, now_s=0.2, workflow="w", prompt_tokens=1000, stage_index=1,
                stage_count=5)
    state.admit("judge", "p", "m", "e0", 10.0, now_s=0.3, workflow="w", prompt_tokens=1200, stage_index=1,
                stage_count=5)
    assert state.context_growth.tokens_per_call("w") == 0.0          # no second stage yet
    state.admit("s2", "p", "m", "e0", 10.0, now_s=1, workflow="w", prompt_tokens=1600, stage_index=2, stage_count=5)
    assert state.context_growth.tokens_per_call("w") == 400           # against stage 1's largest prompt, 1,200
    assert state.resident(state.engines["e0"], now_s=1).growth_tokens == 3 * 600   # 3 stages to come, not 1


def test_a_call_told_again_to_a_restarted_monitor_counts_the_stages_before_it(state):
    """After a restart the monitor sees a program first at its stage 3: two stages are to come, not four."""
    state.admit("r3", "p", "m", "e0", 10.0, now_s=0, workflow="w", prompt_tokens=900, stage_index=3, stage_count=5,
                reregister=True)
    state.context_growth.record("w", 500, 700)
    assert state.resident(state.engines["e0"], now_s=0).growth_tokens == 2 * 200


def test_a_stage_reached_out_of_order_spreads_its_growth_over_the_stages_between(state):
    """A DAG's sibling stages may start in any order: stage 4 before stage 3 adds its growth over two stages,
    and stage 3 then counts as reached."""
    state.admit("a", "p", "m", "e0", 10.0, now_s=0, workflow="w", prompt_tokens=1000, stage_index=2, stage_count=6)
    state.admit("b", "p", "m", "e0", 10.0, now_s=1, workflow="w", prompt_tokens=1600, stage_index=4, stage_count=6)
    assert state.context_growth.tokens_per_call("w") == 300
    state.admit("c", "p", "m", "e0", 10.0, now_s=1, workflow="w", prompt_tokens=1100, stage_index=3, stage_count=6)
    assert state.context_growth.tokens_per_call("w") == 300
    assert state.programs["p"].reached_stage == (4, 1600)


def test_a_conditional_admit_whose_plan_no_longer_fits_is_aborted_and_changes_nothing():
    """``within_kv``: the packer's test on the ledger every balancer's admits went into; a running call
    told again to a restarted monitor is never refused by it."""
    from hetflow.core.errors import Aborted
    from tests.factories import profile

    state = MonitorState(MonitorLimits(engine_stale_after_s=1e9))
    state.report(EngineStatus("e0", model="m", profile=profile(kv_capacity_tokens=1000)), 0.0)
    plan = MemoryPlan(prompt_tokens=400, decode_tokens_per_s=100.0, expected_s=1.0)  # 450, then 500 tokens
    state.admit("a", "p", "m", "e0", 100.0, 0.0, memory_plan=plan, prompt_tokens=400, within_kv=True)
    state.admit("b", "q", "m", "e0", 100.0, 0.0, memory_plan=plan, prompt_tokens=400, within_kv=True)
    seq = state.admit_seq
    with pytest.raises(Aborted, match="no KV room"):
        state.admit("c", "r", "m", "e0", 100.0, 0.0, memory_plan=plan, prompt_tokens=400, within_kv=True)
    assert "c" not in state.entries and "r" not in state.programs and state.admit_seq == seq
    state.admit("c", "r", "m", "e0", 100.0, 0.0, memory_plan=plan, prompt_tokens=400, within_kv=True,
                reregister=True)
    assert "c" in state.entries


def test_an_engine_of_unknown_kv_size_gets_the_default_prefix_index():
    """A profile whose KV size is unknown (0, as a server that has not told it yet) registers the engine
    with the default prefix index, not a half-registered engine without one."""
    from tests.factories import profile

    state = MonitorState(MonitorLimits(prefix_index_blocks=128))
    state.report(EngineStatus("e0", model="m", profile=profile(kv_capacity_tokens=0)), now_s=0)
    assert state.engines["e0"].prefix_index is not None


def test_a_restarted_engine_is_known_by_its_new_incarnation_and_its_old_cache_forgotten():
    """An engine (or the model server behind it) that starts again under its id has an empty KV cache: the
    monitor forgets the prefixes it sent the old one and the programs resident there."""
    state = MonitorState(MonitorLimits())
    state.report(EngineStatus("e0", model="m", incarnation="a.0"), now_s=0)
    state.admit("r1", "p1", "m", "e0", 10.0, now_s=1, prefix_blocks=(11, 12))
    record = state.engines["e0"]
    assert record.prefix_index.matched_blocks((11, 12)) == 2 and record.resident_programs == {"p1"}
    state.report(EngineStatus("e0", model="m", incarnation="a.0", active_request_ids=("r1",)), now_s=2)
    assert record.prefix_index.matched_blocks((11, 12)) == 2   # the same one: nothing forgotten
    state.report(EngineStatus("e0", model="m", incarnation="a.1"), now_s=3)   # its server restarted
    assert record.prefix_index.matched_blocks((11, 12)) == 0 and not record.resident_programs


def test_a_long_sessions_dispatches_keep_its_first_and_its_last(monkeypatch):
    """A session that never goes idle would grow its dispatch list with every call (each snapshot of its
    calls copies it): it keeps its first ones and its last, and counts them all."""
    from hetflow.core.monitor import state as state_module

    monkeypatch.setattr(state_module, "MAX_DISPATCHES_KEPT", 3)
    state = MonitorState(MonitorLimits())
    for engine in ("e0", "e1"):
        state.report(EngineStatus(engine, model="m"), now_s=0)
    for i in range(6):
        state.admit(f"r{i}", "p1", "m", "e0" if i < 5 else "e1", 10.0, now_s=1 + i, prompt_tokens=100 * (i + 1))
        state.release(f"r{i}", now_s=1.5 + i)
    program = state.programs["p1"]
    assert program.dispatches == [("e0", 100), ("e0", 200), ("e1", 600)] and program.dispatch_count == 6
