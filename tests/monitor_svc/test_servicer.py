"""The monitor's servicer: the balancer's KV hold passed to its state (unset when none came), and batches of
snapshots and admits answered call by call as the single methods would answer them."""

import time

import grpc
import pytest

from hetflow.core.errors import InvalidArgument
from hetflow.core.monitor.state import EngineStatus, MonitorLimits, MonitorState
from hetflow.v1 import monitor_pb2
from monitor_svc.servicer import MonitorServicer


async def test_an_admit_carries_the_kv_hold_only_when_the_balancer_decided_one():
    state = MonitorState(MonitorLimits())
    state.report(EngineStatus("e0", model="m"), 0.0)
    servicer = MonitorServicer(state)
    await servicer.Admit(monitor_pb2.AdmitRequest(request_id="held", program_id="p", model="m", engine_id="e0",
                                                  retain_kv_s=2.5), None)
    await servicer.Admit(monitor_pb2.AdmitRequest(request_id="zero", program_id="q", model="m", engine_id="e0",
                                                  retain_kv_s=0.0), None)
    await servicer.Admit(monitor_pb2.AdmitRequest(request_id="none", program_id="r", model="m", engine_id="e0"),
                         None)
    assert [state.entries[r].retain_kv_s for r in ("held", "zero", "none")] == [2.5, 0.0, None]


async def test_a_batch_of_admits_gives_each_its_own_outcome():
    state = MonitorState(MonitorLimits())
    state.report(EngineStatus("e0", model="m"), 0.0)
    servicer = MonitorServicer(state)
    reply = await servicer.AdmitBatch(monitor_pb2.AdmitBatchRequest(admits=[
        monitor_pb2.AdmitRequest(request_id="a", program_id="p", model="m", engine_id="e0"),
        monitor_pb2.AdmitRequest(request_id="b", program_id="q", model="m", engine_id="gone"),
        monitor_pb2.AdmitRequest(request_id="c", program_id="r", model="m", engine_id="e0"),
        monitor_pb2.AdmitRequest(request_id="a", program_id="p", model="m", engine_id="e0")]), None)  # twice
    assert [o.code for o in reply.outcomes] == [0, grpc.StatusCode.NOT_FOUND.value[0], 0,
                                                grpc.StatusCode.INVALID_ARGUMENT.value[0]]
    assert "gone" in reply.outcomes[1].details and set(state.entries) == {"a", "c"}
    assert [o.reply.admit_seq for o in reply.outcomes if not o.code] == [1, 2]


async def test_a_batch_of_snapshots_answers_each_call_as_snapshot_would():
    state = MonitorState(MonitorLimits())
    state.report(EngineStatus("e0", model="m", active_request_ids=("x",)), 0.0)
    servicer = MonitorServicer(state)
    await servicer.Admit(monitor_pb2.AdmitRequest(request_id="a", program_id="p", model="m", engine_id="e0"), None)
    calls = [monitor_pb2.SnapshotRequest(program_id="p"), monitor_pb2.SnapshotRequest(program_id="new"),
             monitor_pb2.SnapshotRequest(request_ids=True)]
    batch = await servicer.Snapshots(monitor_pb2.SnapshotsRequest(calls=calls), None)
    alone = [await servicer.Snapshot(c, None) for c in calls]
    assert [s.program_model for s in batch.snapshots] == ["m", "", ""]
    assert [list(s.engines[0].status.active_request_ids) for s in batch.snapshots] == [[], [], ["x"]]
    for together, single in zip(batch.snapshots, alone):
        together.taken_unix_s = single.taken_unix_s = 0.0
        for engine in (*together.engines, *single.engines):
            engine.status_age_s = 0.0
        assert together == single


async def test_a_batch_larger_than_the_monitor_takes_is_refused():
    servicer = MonitorServicer(MonitorState(MonitorLimits()))
    with pytest.raises(InvalidArgument, match="at most 256"):
        await servicer.Snapshots(monitor_pb2.SnapshotsRequest(calls=[monitor_pb2.SnapshotRequest()] * 257), None)
    with pytest.raises(InvalidArgument, match="at most 256"):
        await servicer.AdmitBatch(monitor_pb2.AdmitBatchRequest(admits=[monitor_pb2.AdmitRequest()] * 257), None)


class StreamContext:
    """A stream's servicer context that records the headers sent."""

    def __init__(self) -> None:
        self.headers_sent = 0

    async def send_initial_metadata(self, initial_metadata) -> None:
        self.headers_sent += 1


async def test_the_release_stream_sends_headers_then_ends_each_release_and_a_batch_too_large_fails_only_itself():
    state = MonitorState(MonitorLimits())
    state.report(EngineStatus("e0", model="m"), 0.0)
    servicer = MonitorServicer(state)
    for request_id in ("a", "b"):
        await servicer.Admit(monitor_pb2.AdmitRequest(request_id=request_id, program_id=request_id, model="m",
                                                      engine_id="e0"), None)

    async def batches():
        yield monitor_pb2.ReleaseBatchRequest(releases=[monitor_pb2.ReleaseRequest(request_id="x")] * 257)
        yield monitor_pb2.ReleaseBatchRequest(releases=[
            monitor_pb2.ReleaseRequest(request_id="a", reason="completed", output_tokens=7),
            monitor_pb2.ReleaseRequest(request_id="b", reason="deadline"),
            monitor_pb2.ReleaseRequest(request_id="never-admitted", reason="completed")])

    context = StreamContext()
    replies = [reply async for reply in servicer.ReleaseStream(batches(), context)]
    assert context.headers_sent == 1  # at once, so a client's first write knows the stream is served
    assert replies[0].status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0] and not replies[0].replies
    assert [r.found for r in replies[1].replies] == [True, True, False] and not replies[1].status.code
    assert not state.entries and state.programs["a"].completed == 1 and state.programs["b"].completed == 0


def test_the_sweep_publishes_what_the_working_set_gate_counts_per_engine():
    from prometheus_client import REGISTRY

    state = MonitorState(MonitorLimits())
    state.report(EngineStatus("gate-e0", model="m"), time.time())
    state.report(EngineStatus("gate-e1", model="m"), time.time())
    for request_id, program_id in (("a", "p"), ("b", "q")):
        state.admit(request_id, program_id, "m", "gate-e0", 10.0, now_s=time.time(), prompt_tokens=300)
    state.admit("c1", "r", "m", "gate-e1", 10.0, now_s=time.time(), workflow="w", prompt_tokens=100,
                stage_index=1, stage_count=3)
    state.release("c1", now_s=time.time(), output_tokens=50)
    state.admit("c2", "r", "m", "gate-e1", 10.0, now_s=time.time(), workflow="w", prompt_tokens=400,
                stage_index=2, stage_count=3)   # grew by 300 a call, one call to come
    MonitorServicer(state).sweep()

    def gauge(name: str, engine: str) -> float | None:
        return REGISTRY.get_sample_value(name, {"engine": engine})

    assert gauge("hetflow_monitor_resident_tokens", "gate-e0") == 600
    assert gauge("hetflow_monitor_resident_programs", "gate-e0") == 2
    assert gauge("hetflow_monitor_resident_tokens", "gate-e1") == 400
    assert gauge("hetflow_monitor_resident_growth_tokens", "gate-e1") == 300
    assert gauge("hetflow_monitor_resident_growth_tokens", "gate-e0") == 0   # told no stages: no growth counted


def test_an_engine_the_sweep_forgets_leaves_no_gauge_behind():
    from prometheus_client import REGISTRY

    state = MonitorState(MonitorLimits())
    silent_since_s = time.time() - 1_000.0   # past lost_entries_after_s and engine_failed_after_s
    state.report(EngineStatus("swept-e0", model="m"), silent_since_s)
    state.admit("x", "p", "m", "swept-e0", 10.0, now_s=silent_since_s, prompt_tokens=100)
    servicer = MonitorServicer(state)
    servicer._observe("swept-e0")   # as an admit publishes it
    assert REGISTRY.get_sample_value("hetflow_monitor_in_flight_requests", {"engine": "swept-e0"}) == 1
    servicer.sweep()
    assert "swept-e0" not in state.engines
    for name in ("in_flight_requests", "in_flight_tokens", "resident_tokens", "resident_programs"):
        assert REGISTRY.get_sample_value(f"hetflow_monitor_{name}", {"engine": "swept-e0"}) is None


def test_agents_named_as_the_logs_own_keys_are_logged():
    state = MonitorState(MonitorLimits())
    state.refresh_anchor_distances = lambda: {"event": 0.5, "level": 1.0}
    MonitorServicer(state).refresh_anchor_distances()
