"""The engines kept from the monitor's stream of changes: a decision on the watch asks the monitor only for
its call's own part and sees the cluster as the whole snapshot shows it (the call's prefix match
included); a watch that went silent, or follows another monitor than the last whole snapshot came from,
is not used."""

import asyncio
import dataclasses
import time

from balancer_svc.config import BalancerConfig
from balancer_svc.engine_watch import STALE_S, EngineWatch
from balancer_svc.monitor_view import MonitorView
from hetflow import wire
from hetflow.core.monitor.state import EngineStatus, MonitorLimits, MonitorState
from hetflow.v1 import monitor_pb2
from monitor_svc.servicer import MonitorServicer
from tests.factories import StreamedCall, call, profile


class WatchedMonitor:
    """A monitor stub answered by a real ``MonitorServicer`` in this process, its watch included; records
    whether each snapshot asked for the engines."""

    def __init__(self, servicer: MonitorServicer) -> None:
        self.servicer = servicer
        self.asked_engines: list[bool] = []

    async def Snapshot(self, request, timeout):
        self.asked_engines.append(not request.without_engines)
        return await self.servicer.Snapshot(request, None)

    async def Snapshots(self, request, timeout):
        self.asked_engines.extend(not c.without_engines for c in request.calls)
        return await self.servicer.Snapshots(request, None)

    def SnapshotsStream(self):
        return StreamedCall(self.Snapshots, monitor_pb2.SnapshotsReply)

    def WatchEngines(self, request):
        return self.servicer.WatchEngines(request, None)


def _state() -> MonitorState:
    state = MonitorState(MonitorLimits(engine_stale_after_s=1e9))
    for engine_id, model in (("small-0", "small"), ("small-1", "small"), ("large-0", "large")):
        state.report(EngineStatus(engine_id, model=model, address="127.0.0.1:1", serving=True,
                                  profile=profile()), time.time())
    return state


def _watching(state: MonitorState, watch_interval_s: float, reads: bool
              ) -> tuple[MonitorServicer, WatchedMonitor, MonitorView]:
    """A started balancer's view of a real monitor over ``state``; ``reads``: prefixes and in-flight calls."""
    servicer = MonitorServicer(state, watch_interval_s=watch_interval_s)
    monitor = WatchedMonitor(servicer)
    view = MonitorView(BalancerConfig(monitor_address="127.0.0.1:1"), monitor, reads_prefix=reads,
                       reads_in_flight_calls=reads)
    view.start()
    return servicer, monitor, view


async def _until(condition, what: str) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


async def test_a_decision_on_the_watch_sees_what_the_whole_snapshot_shows_and_asks_only_for_its_own_part():
    state = _state()
    servicer, monitor, view = _watching(state, watch_interval_s=0.001, reads=True)
    try:
        seen_call = dataclasses.replace(call(prompt="word " * 200, program_id="p1"), prefix_blocks=(11, 12, 13))
        await view.snapshot(seen_call)  # no whole snapshot yet to follow: asks for the engines
        await servicer.Admit(monitor_pb2.AdmitRequest(
            request_id="a", program_id="p1", model="small", engine_id="small-1", predicted_tokens=40,
            prompt_tokens=200, prefix_blocks=seen_call.prefix_blocks), None)
        await _until(lambda: (w := view.engine_watch.current(state.epoch)) is not None
                     and w.admit_seq == state.admit_seq, "the watch heard the admit")
        watched, admit_seq, stale_s = await view.snapshot(seen_call)
        whole = wire.snapshot_from_proto(await servicer.Snapshot(monitor_pb2.SnapshotRequest(
            program_id="p1", prefix_blocks=seen_call.prefix_blocks, in_flight_calls=True), None))
    finally:
        await view.close()
    assert monitor.asked_engines == [True, False]
    assert (admit_seq, stale_s) == (state.admit_seq, 0.0)
    assert watched.engines == whole.engines
    assert [e.prefix_match_blocks > 0 for e in watched.engines] == [False, True, False]
    assert watched.program_model == "small"
    assert dataclasses.replace(watched, taken_unix_s=0.0) == dataclasses.replace(whole, taken_unix_s=0.0)


async def test_an_engine_the_watch_has_not_heard_of_yet_sends_the_decision_to_the_whole_snapshot():
    """The monitor counts its engines in each call's own part: a watch that counts fewer (an engine came
    since its last message; here the monitor looks only once a minute) is not decided on."""
    state = _state()
    _, monitor, view = _watching(state, watch_interval_s=60.0, reads=False)
    try:
        await view.snapshot(call(program_id="p1"))
        await _until(lambda: view.engine_watch.current(state.epoch) is not None, "the watch's first message")
        on_the_watch, _, _ = await view.snapshot(call(program_id="p1"))
        state.report(EngineStatus("large-1", model="large", address="127.0.0.1:2", serving=True, profile=profile()),
                     time.time())
        after_the_new_engine, _, _ = await view.snapshot(call(program_id="p1"))
    finally:
        await view.close()
    assert monitor.asked_engines == [True, False, False, True]  # the last asked again, with the engines
    assert len(on_the_watch.engines) == 3
    assert [e.engine_id for e in after_the_new_engine.engines][-1] == "large-1"


def test_a_silent_watch_or_one_of_another_monitor_is_not_used():
    state = _state()
    feed_message = MonitorServicer(state).WatchEngines  # the monitor's own first message
    watch = EngineWatch(lambda: None, in_flight_calls=False, profiles=wire.ProfileMemo())

    async def first_message():
        stream = feed_message(monitor_pb2.WatchEnginesRequest(), None)
        try:
            return await stream.__anext__()
        finally:
            await stream.aclose()

    message = asyncio.run(first_message())
    watch.apply(message, time.monotonic())
    assert watch.current(state.epoch) is not None and len(watch.current(state.epoch).views) == 3
    assert watch.current("another-epoch") is None
    watch.apply(monitor_pb2.EngineChanges(admit_seq=0, monitor_epoch=state.epoch), time.monotonic() - 2 * STALE_S)
    assert watch.current(state.epoch) is None


async def test_a_watch_that_fails_on_a_message_it_cannot_take_is_watched_again(monkeypatch):
    import balancer_svc.engine_watch as engine_watch

    monkeypatch.setattr(engine_watch, "RETRY_S", 0.01)
    state = _state()
    servicer, attempts = MonitorServicer(state, watch_interval_s=0.01), []

    async def unreadable():
        raise ValueError("a profile this balancer cannot read")
        yield

    def watch_engines(request):
        attempts.append(request)
        return unreadable() if len(attempts) == 1 else servicer.WatchEngines(request, None)

    class Monitor:
        WatchEngines = staticmethod(watch_engines)

    watch = EngineWatch(lambda: Monitor(), in_flight_calls=False, profiles=wire.ProfileMemo())
    watch.start()
    try:
        await _until(lambda: watch.current(state.epoch) is not None, "the watch followed again")
    finally:
        await watch.close()
    assert len(attempts) == 2
