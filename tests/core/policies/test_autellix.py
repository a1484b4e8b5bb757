"""Autellix's PLAS / ATLAS priorities and its data-locality balancer, on the paper's definitions."""

from dataclasses import replace

from hetflow.core import plugins
from hetflow.core.monitor.snapshot import cluster_snapshot
from hetflow.core.monitor.state import EngineStatus, MonitorLimits, MonitorState
from hetflow.core.policies.contracts import PolicyStore, Prediction
from tests.factories import call, context, engine, profile, snapshot


def fan_out_program() -> MonitorState:
    """A root call of 2 s, then two parallel calls of 3 s and 1 s (Autellix eq. 1-2)."""
    state = MonitorState(MonitorLimits())
    state.report(EngineStatus("e0", model="m", profile=profile()), 0.0)
    state.admit("root", "p", "m", "e0", 10.0, 0.0)
    state.release("root", 2.0, started_s=0.0)
    state.admit("a", "p", "m", "e0", 10.0, 2.0)
    state.admit("b", "p", "m", "e0", 10.0, 2.0)
    state.release("b", 3.0, started_s=2.0)
    state.release("a", 5.0, started_s=2.0)
    return state


def test_plas_sums_service_and_atlas_keeps_the_critical_path():
    view = cluster_snapshot(fan_out_program(), 5.0, program_id="p")
    assert view.program_service_s == 6.0                 # 2 + 3 + 1
    assert view.program_critical_service_s == 5.0        # max(2 + 3, 2 + 1)
    for variant, expected in (("plas", 6.0), ("atlas", 5.0)):
        rule = plugins.build("priority-rule", "attained-service", {"variant": variant})
        ctx = replace(context(5.0), snapshot=view)
        assert rule.priority(call(), Prediction(1.0), ctx)[0].key == expected


def test_a_new_program_has_attained_nothing_and_comes_first():
    state = fan_out_program()
    rule = plugins.build("priority-rule", "attained-service")
    fresh = replace(context(5.0), snapshot=cluster_snapshot(state, 5.0, program_id="new"))
    old = replace(context(5.0), snapshot=cluster_snapshot(state, 5.0, program_id="p"))
    assert rule.priority(call(), Prediction(1.0), fresh)[0] < rule.priority(call(), Prediction(1.0), old)[0]


def locality(prompt_tokens: int, dispatches=()):
    engines = (engine("a", "m", in_flight_requests=3), engine("b", "m", in_flight_requests=1))
    view = replace(snapshot(*engines), program_dispatches=tuple(dispatches))
    picker = plugins.build("engine-picker", "program-locality")
    return picker.pick(call(input_tokens=prompt_tokens), view, "m", Prediction(1.0), PolicyStore())


def test_short_calls_go_to_the_least_used_engine():
    assert locality(2048, [("a", 5000)]).chosen == "b"          # at most 2048 tokens: short


def test_long_calls_stay_on_the_engine_of_the_programs_first_long_call():
    assert locality(4000, [("b", 100), ("a", 3000), ("b", 5000)]).chosen == "a"
    assert locality(4000, [("a", 100)]).chosen == "b"           # no long call yet: least used, then pinned
