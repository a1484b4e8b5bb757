"""The engines' loads as they change (``Monitor.WatchEngines``): every engine first, then only those whose
load changed, a heartbeat while nothing does, and engines the monitor forgot named as removed."""

from hetflow.core.monitor.state import EngineStatus, MonitorLimits, MonitorState
from hetflow.v1 import monitor_pb2
from monitor_svc.engine_feed import HEARTBEAT_S, REFRESH_S, EngineFeed
from monitor_svc.servicer import MonitorServicer


def _state() -> MonitorState:
    state = MonitorState(MonitorLimits(engine_stale_after_s=1e9))
    for engine_id in ("e0", "e1", "e2"):
        state.report(EngineStatus(engine_id, model="m", serving=True), 100.0)
    return state


def _ids(message: monitor_pb2.EngineChanges) -> list[str]:
    return [load.status.engine_id for load in message.engines]


async def test_the_first_message_holds_every_engine_then_only_the_engine_an_admit_changed():
    state = _state()
    servicer = MonitorServicer(state)
    feed = EngineFeed(in_flight_calls=False)
    first = feed.changes(state, servicer.reports, 100.0)
    assert first.full and _ids(first) == ["e0", "e1", "e2"] and first.monitor_epoch == state.epoch
    assert feed.changes(state, servicer.reports, 100.001) is None  # nothing changed, no heartbeat due

    await servicer.Admit(monitor_pb2.AdmitRequest(request_id="a", program_id="p", model="m", engine_id="e1",
                                                  predicted_tokens=50), None)
    second = feed.changes(state, servicer.reports, 100.002)
    assert not second.full and _ids(second) == ["e1"]
    assert second.engines[0].in_flight_tokens == 50 and second.admit_seq == state.admit_seq == 1


def test_a_heartbeat_comes_while_nothing_changes_and_a_forgotten_engine_is_named_removed():
    state = _state()
    feed = EngineFeed(in_flight_calls=False)
    reports = MonitorServicer(state).reports
    feed.changes(state, reports, 100.0)
    assert feed.changes(state, reports, 100.0 + REFRESH_S) is None  # looked at again: still the same
    heartbeat = feed.changes(state, reports, 100.0 + HEARTBEAT_S)
    assert heartbeat is not None and not heartbeat.full and not heartbeat.engines and not heartbeat.removed_engine_ids

    del state.engines["e2"]
    state.version += 1
    gone = feed.changes(state, reports, 100.0 + HEARTBEAT_S + 0.001)
    assert list(gone.removed_engine_ids) == ["e2"] and not gone.engines


def test_a_report_changes_its_engine_alone_and_its_age_is_sent_but_not_compared():
    state = _state()
    feed = EngineFeed(in_flight_calls=False)
    reports = MonitorServicer(state).reports
    feed.changes(state, reports, 100.0)
    state.report(EngineStatus("e2", model="m", serving=True, waiting=3), 100.5)
    changed = feed.changes(state, reports, 101.0)
    assert _ids(changed) == ["e2"] and changed.engines[0].status.waiting == 3
    assert abs(changed.engines[0].status_age_s - 0.5) < 1e-9  # e0 and e1 aged too, and were not resent


async def test_the_servicer_streams_the_feed():
    state = _state()
    servicer = MonitorServicer(state, watch_interval_s=0.001)
    stream = servicer.WatchEngines(monitor_pb2.WatchEnginesRequest(), None)
    first = await stream.__anext__()
    await servicer.Admit(monitor_pb2.AdmitRequest(request_id="a", program_id="p", model="m", engine_id="e0"), None)
    second = await stream.__anext__()
    await stream.aclose()
    assert first.full and len(first.engines) == 3 and _ids(second) == ["e0"]
