"""The engines' loads as they change (``Monitor.WatchEngines``): every engine first, then only those whose
load changed, a heartbeat while nothing does, and engines the monitor forgot named as removed."""

import asyncio

from hetflow.core.monitor.state import EngineStatus, MonitorLimits, MonitorState
from hetflow.v1 import monitor_pb2
from monitor_svc import engine_feed
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


def test_between_changes_the_watch_may_sleep_until_a_refresh_or_the_heartbeat_is_due():
    state = _state()
    feed = EngineFeed(in_flight_calls=False)
    reports = MonitorServicer(state).reports
    assert feed.idle_for_s(state, 100.0) == 0.0  # nothing built yet
    feed.changes(state, reports, 100.0)
    assert abs(feed.idle_for_s(state, 100.0) - min(REFRESH_S, HEARTBEAT_S)) < 1e-9
    assert feed.idle_for_s(state, 100.0 + HEARTBEAT_S + 1) == 0.0  # overdue
    state.report(EngineStatus("e1", model="m", serving=True, waiting=1), 100.01)
    assert feed.idle_for_s(state, 100.02) == 0.0  # the state changed since the last look


async def test_an_idle_watch_is_woken_by_a_change_not_by_the_clock(monkeypatch):
    """With the refresh and heartbeat an hour away, the next message can only come from the change."""
    monkeypatch.setattr(engine_feed, "REFRESH_S", 3600.0)
    monkeypatch.setattr(engine_feed, "HEARTBEAT_S", 3600.0)
    state = _state()
    servicer = MonitorServicer(state, watch_interval_s=0.0)
    watch = servicer.WatchEngines(monitor_pb2.WatchEnginesRequest(), None)
    first = await watch.__anext__()
    assert first.full and len(state.on_change) == 1
    asyncio.get_running_loop().call_later(0.05, state.report, EngineStatus("e2", model="m", serving=True, waiting=2),
                                          100.1)
    changed = await asyncio.wait_for(watch.__anext__(), 30)
    assert _ids(changed) == ["e2"] and changed.engines[0].status.waiting == 2
    await watch.aclose()
    assert state.on_change == []  # the watcher that went no longer listens
