"""Every shared conversion round-trips: what the monitor sends is what the balancer decides on."""

import pytest

from hetflow import wire
from hetflow.core.call import SamplingSpec
from hetflow.core.engine.profile import load_profile
from hetflow.core.engine.queues import QueueConfig
from hetflow.core.errors import InvalidArgument
from hetflow.core.monitor.memory_ledger import MemoryPlan
from hetflow.core.monitor.snapshot import cluster_snapshot
from hetflow.core.monitor.state import EngineStatus, MonitorLimits, MonitorState
from hetflow.core.snapshot import InFlightCall
from hetflow.v1 import common_pb2
from tests.factories import profile


def test_the_monitor_snapshot_round_trips():
    state = MonitorState(MonitorLimits())
    state.report(EngineStatus("e0", model="m", address="h:1", waiting=1, running=2, kv_cache_usage=0.25,
                              profile=profile(), active_request_ids=("x",)), 0.0)
    state.admit("r0", "p1", "m", "e0", 8.0, 0.0, prompt_tokens=3000, agent="a")
    state.release("r0", 0.05, started_s=0.01)
    state.admit("r1", "p1", "m", "e0", 64.0, 0.1, predicted_cost_s=0.5, memory_plan=MemoryPlan(10, 100.0, 1.0),
                prefix_blocks=(7, 8, 9), prompt_tokens=48)
    state.admit("q0", "p2", "m", "e0", 8.0, 0.0, prompt_tokens=100, stage_index=1, stage_count=3)
    state.release("q0", 0.02, output_tokens=50)
    state.admit("q1", "p2", "m", "e0", 8.0, 0.03, prompt_tokens=400, stage_index=2, stage_count=3)
    state.release("q1", 0.04)                                        # p2 grew 300 a call, one call to come
    state.agent_stats.anchor_distance_s["a"] = 2.5
    sent = cluster_snapshot(state, 0.2, "p1", "a", prefix_blocks=(7, 8, 5), in_flight_calls=True)
    assert sent.program_dispatches == (("e0", 3000), ("e0", 48)) and sent.program_service_s > 0
    assert sent.engines[0].prefix_match_blocks == 2 and sent.engines[0].resident_tokens == 48 + 400
    assert sent.engines[0].resident_programs == 2 and sent.engines[0].resident_growth_tokens == 300
    assert sent.engines[0].in_flight_calls == (InFlightCall(48, 64.0, 0.1),)
    assert sent.agent_tool_gap is not None and sent.agent_tool_gap.samples == 1  # r0's end to r1's admit
    received = wire.snapshot_from_proto(wire.snapshot_to_proto(sent, state.engines, state.admit_seq))
    assert received.engines[0].kv_ledger_tokens == pytest.approx(sent.engines[0].kv_ledger_tokens)
    assert received == sent.__class__(**{**sent.__dict__, "engines": received.engines})
    for field in ("engine_id", "model", "address", "waiting", "running", "kv_cache_usage", "in_flight_tokens",
                  "in_flight_requests", "in_flight_cost_s", "dispatched_since_report", "max_batch_size",
                  "kv_capacity_tokens", "profile", "healthy", "suspended", "prefix_match_blocks",
                  "prefix_index_blocks", "pending_prefill_tokens", "resident_tokens", "resident_growth_tokens",
                  "resident_programs",
                  "in_flight_calls"):
        assert getattr(received.engines[0], field) == getattr(sent.engines[0], field), field
    unasked = wire.snapshot_from_proto(wire.snapshot_to_proto(cluster_snapshot(state, 0.2, "p1", "a"), state.engines,
                                                              state.admit_seq))
    assert unasked.engines[0].in_flight_calls == ()  # sent only to the policies that read them


def test_a_program_started_at_time_0_crosses_as_0_and_one_never_seen_as_unknown():
    state = MonitorState(MonitorLimits())
    state.report(EngineStatus("e0", model="m", profile=profile()), 0.0)
    state.admit("r0", "p1", "m", "e0", 8.0, 0.0)
    for program_id, start_s in (("p1", 0.0), ("p9", None)):
        sent = cluster_snapshot(state, 0.2, program_id)
        received = wire.snapshot_from_proto(wire.snapshot_to_proto(sent, state.engines, state.admit_seq))
        assert sent.program_start_s == received.program_start_s == start_s, program_id


def test_snapshots_carry_the_engines_request_ids_only_when_asked_and_each_report_is_built_once():
    state = MonitorState(MonitorLimits())
    state.report(EngineStatus("e0", model="m", profile=profile(), active_request_ids=("x", "y")), 0.0)
    reports = wire.ReportProtos()
    plain = wire.snapshot_to_proto(cluster_snapshot(state, 0.1), state.engines, state.admit_seq, reports)
    asked = wire.snapshot_to_proto(cluster_snapshot(state, 0.1), state.engines, state.admit_seq, reports,
                                   request_ids=True)
    assert list(plain.engines[0].status.active_request_ids) == []
    assert list(asked.engines[0].status.active_request_ids) == ["x", "y"]
    assert reports.of(state.engines["e0"]) is reports.of(state.engines["e0"])
    state.report(EngineStatus("e0", model="m", profile=profile(), waiting=3), 0.2)  # a new report: built again
    assert reports.of(state.engines["e0"]).waiting == 3


def test_the_balancer_converts_a_profile_again_only_when_it_changes():
    memo, msg = wire.ProfileMemo(), wire.profile_to_proto(profile())
    first = memo.of("e0", msg)
    assert memo.of("e0", msg) is first and first == wire.profile_from_proto(msg)
    msg.kv_capacity_tokens += 16
    assert memo.of("e0", msg).kv_capacity_tokens == first.kv_capacity_tokens + 16


def test_an_engine_status_round_trips_and_needs_an_id():
    status = EngineStatus("e0", model="m", backend="sim", waiting=4, preemptions_total=7, profile=profile(),
                          active_request_ids=("a", "b"), pending_prefill_tokens=321)
    assert wire.engine_status_from_proto(wire.engine_status_to_proto(status)) == status
    with pytest.raises(InvalidArgument, match="engine_id"):
        wire.engine_status_from_proto(common_pb2.EngineStatus())


def test_sampling_round_trips_and_max_tokens_is_bounded():
    spec = SamplingSpec(max_tokens=12, temperature=0.5, seed=3, stop=("\n",), presence_penalty=0.5,
                        frequency_penalty=-1.0)
    assert wire.sampling_from_proto(wire.sampling_to_proto(spec), 100) == spec
    with pytest.raises(InvalidArgument, match="max_tokens"):
        wire.sampling_from_proto(common_pb2.SamplingParams(max_tokens=101), 100)


@pytest.mark.parametrize("field, value", [("temperature", -0.5), ("top_p", 0.0), ("top_p", 1.5),
                                          ("stop", ["x"] * 65), ("presence_penalty", 2.5),
                                          ("frequency_penalty", -3.0)])
def test_sampling_values_outside_what_vllm_accepts_are_invalid_arguments_naming_the_field(field, value):
    msg = common_pb2.SamplingParams(max_tokens=8)
    if field == "stop":
        msg.stop.extend(value)
    else:
        setattr(msg, field, value)
    with pytest.raises(InvalidArgument, match=f"sampling.{field}"):
        wire.sampling_from_proto(msg, 100)


@pytest.mark.parametrize("spec", ["qwen2.5-7b-instruct@a6000", "qwen2.5-7b-instruct@h100-80g"])
def test_a_profile_crosses_the_wire_as_its_linear_form_with_the_overhead_folded_in(spec):
    """The balancer estimates with the four coefficients; the engine's overhead is not lost on the way."""
    sent = load_profile(spec)
    received = wire.profile_from_proto(wire.profile_to_proto(sent))
    assert received.decode_base_ms == pytest.approx(sent.decode_base_ms + sent.iteration_overhead_ms)
    linear = (sent.iteration_overhead_ms + sent.decode_base_ms + 32 * sent.decode_ms_per_seq
              + 32000 * sent.decode_ms_per_batch_token)
    assert received.step_ms(0, 32, 32000) == pytest.approx(linear)
    assert received.step_ms(0, 32, 32000) == pytest.approx(sent.as_reported().step_ms(0, 32, 32000))


def test_a_simulated_engine_reports_what_a_live_one_would():
    """The simulator's balancer decides on the profile as it crosses the wire, as a live balancer does."""
    from simulator.clock import EventLoop
    from simulator.engine import VirtualEngine

    profile = load_profile("qwen2.5-7b-instruct@h100-80g")
    engine = VirtualEngine("e", profile.model, profile, QueueConfig(), EventLoop(), lambda _: None)
    reported = engine.status().profile
    assert reported.operator_tables is None and reported.iteration_overhead_ms == 0.0
    assert reported.step_ms(300, 8, 8000) == pytest.approx(
        wire.profile_from_proto(wire.profile_to_proto(profile)).step_ms(300, 8, 8000))
