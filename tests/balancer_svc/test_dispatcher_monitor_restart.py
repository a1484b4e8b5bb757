"""A monitor killed and restarted empty (issue 31): until the new monitor has heard from the engines its
predecessor showed healthy, calls are decided on the predecessor's last snapshot, whichever of the
balancer's requests reaches the new monitor first. The races are played on a stub monitor, step by
step, so each test is deterministic."""

import asyncio

import grpc

from balancer_svc.config import BalancerConfig
from balancer_svc.dispatcher import Dispatcher
from hetflow import wire
from hetflow.core.monitor.snapshot import cluster_snapshot
from hetflow.core.monitor.state import EngineStatus, MonitorLimits, MonitorState
from hetflow.v1 import monitor_pb2
from tests.factories import StreamedCall, call, profile


def _failure(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


class StubMonitor:
    """The monitor's Snapshot and Admit over a ``MonitorState``; ``kill`` makes it refuse connections,
    ``restart`` brings up a new process (new epoch, no engine, nothing in flight). ``probed`` is set when
    a snapshot without a call (the balancer's probe) is answered."""

    def __init__(self, state: MonitorState) -> None:
        self.state: MonitorState | None = state
        self.probed = asyncio.Event()

    def kill(self) -> None:
        self.state = None

    def restart(self) -> MonitorState:
        self.state = MonitorState(MonitorLimits(engine_stale_after_s=1e9))
        self.probed.clear()
        return self.state

    def _alive(self) -> MonitorState:
        if self.state is None:
            raise _failure(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses: Connection refused")
        return self.state

    async def Snapshot(self, request, timeout):
        state = self._alive()
        reply = wire.snapshot_to_proto(cluster_snapshot(state, 1.0, request.program_id), state.engines,
                                       state.admit_seq)
        reply.monitor_epoch = state.epoch
        if not request.program_id:
            self.probed.set()
        return reply

    async def Admit(self, request, timeout):
        state = self._alive()
        try:
            state.admit(request.request_id, request.program_id, request.model, request.engine_id,
                        request.predicted_tokens, 1.0, reregister=request.reregister)
        except KeyError as exc:
            raise _failure(grpc.StatusCode.NOT_FOUND, str(exc)) from exc
        return monitor_pb2.AdmitReply(admit_seq=state.admit_seq, monitor_epoch=state.epoch)

    async def Snapshots(self, request, timeout):
        self._alive()
        return monitor_pb2.SnapshotsReply(snapshots=[await self.Snapshot(c, timeout) for c in request.calls])

    async def AdmitBatch(self, request, timeout):
        self._alive()
        reply = monitor_pb2.AdmitBatchReply()
        for admit in request.admits:
            try:
                reply.outcomes.add(reply=await self.Admit(admit, timeout))
            except grpc.aio.AioRpcError as exc:
                reply.outcomes.add(code=exc.code().value[0], details=exc.details())
        return reply

    def SnapshotsStream(self):
        return StreamedCall(self.Snapshots, monitor_pb2.SnapshotsReply)

    def AdmitStream(self):
        return StreamedCall(self.AdmitBatch, monitor_pb2.AdmitBatchReply)

    async def Complete(self, request, timeout):
        self._alive()
        return monitor_pb2.ReleaseReply()

    Cancel = Complete

    def ReleaseStream(self):
        async def release_batch(batch, timeout):
            return monitor_pb2.ReleaseBatchReply(replies=[await self.Complete(r, timeout) for r in batch.releases])
        return StreamedCall(release_batch, monitor_pb2.ReleaseBatchReply)


def _report(state: MonitorState, *engines: str) -> None:
    for engine_id in engines:
        state.report(EngineStatus(engine_id, model="small", profile=profile()), 1.0)


def _dispatcher(monitor: StubMonitor, **cfg) -> Dispatcher:
    dispatcher = Dispatcher(BalancerConfig(monitor_address="127.0.0.1:1", **cfg))
    dispatcher.monitor_view.monitor = monitor
    return dispatcher


def _first_monitor() -> StubMonitor:
    state = MonitorState(MonitorLimits(engine_stale_after_s=1e9))
    _report(state, "small-0", "small-1")
    return StubMonitor(state)


async def _decided_then_restarted(**cfg) -> tuple[MonitorState, Dispatcher]:
    """A dispatcher that decided a call on the first monitor, since killed and restarted empty; the new
    monitor's state."""
    monitor = _first_monitor()
    dispatcher = _dispatcher(monitor, **cfg)
    await dispatcher.decide(call(program_id="p-before"))
    monitor.kill()
    return monitor.restart(), dispatcher


def test_a_probe_answered_first_by_the_restarted_monitor_does_not_make_its_empty_view_the_one_decided_on():
    """The loss seen under load: the balancer's probe reached the new monitor before any engine had
    reported to it, and the next call was decided on that empty view ("no healthy engine serves any
    model", UNAVAILABLE before its first token)."""
    async def scenario():
        monitor = _first_monitor()
        dispatcher = _dispatcher(monitor, monitor_probe_s=0.01)
        try:
            before = await dispatcher.decide(call(program_id="p-before"))
            monitor.kill()
            new = monitor.restart()
            dispatcher.start()
            await asyncio.wait_for(monitor.probed.wait(), 30.0)  # a bound on waiting, not a timing under test
            during = await dispatcher.decide(call(program_id="p-during"))
            _report(new, "small-0", "small-1")
            after = await dispatcher.decide(call(program_id="p-after"))
            return before, during, after
        finally:
            await dispatcher.close()

    before, during, after = asyncio.run(scenario())
    assert before.receipt.stale_snapshot_s == 0
    assert during.engine.engine_id in ("small-0", "small-1") and during.receipt.stale_snapshot_s > 0
    assert after.receipt.stale_snapshot_s == 0  # every engine has reported: the new monitor's view is used


def test_a_monitor_that_restarts_slowly_is_still_given_time_to_hear_from_its_engines():
    """The rebuild window counts from the new monitor's first answer, not from the old monitor's last
    one: on a loaded host the restart itself can take longer than the window."""
    async def scenario():
        monitor = _first_monitor()
        dispatcher = _dispatcher(monitor, rebuild_wait_s=2.0)
        try:
            await dispatcher.decide(call(program_id="p-before"))
            monitor.kill()
            await asyncio.sleep(2.5)  # the restart takes longer than rebuild_wait_s
            new = monitor.restart()
            during = await dispatcher.decide(call(program_id="p-during"))
            _report(new, "small-1")
            return during, await dispatcher.decide(call(program_id="p-half"))
        finally:
            await dispatcher.close()

    during, half = asyncio.run(scenario())
    assert during.engine.engine_id in ("small-0", "small-1") and during.receipt.stale_snapshot_s > 2.0
    assert half.receipt.stale_snapshot_s > 2.0  # small-0 has not reported yet: still the old view


def test_once_the_rebuild_window_has_passed_the_new_monitors_view_is_used_as_it_is():
    """An engine that died with the old monitor never reports to the new one: after ``rebuild_wait_s``
    from the new monitor's first answer its view is taken without it."""
    async def scenario():
        new, dispatcher = await _decided_then_restarted(rebuild_wait_s=0.2)
        try:
            _report(new, "small-1")
            during = await dispatcher.decide(call(program_id="p-during"))
            await asyncio.sleep(0.3)  # past the window
            return during, await dispatcher.decide(call(program_id="p-after"))
        finally:
            await dispatcher.close()

    during, after = asyncio.run(scenario())
    assert during.receipt.stale_snapshot_s > 0
    assert after.receipt.stale_snapshot_s == 0 and after.engine.engine_id == "small-1"


def test_a_new_monitor_no_engine_has_reported_to_is_not_decided_on_after_the_window_either():
    """Engines starved past the window: an empty view could only fail calls, so the old one is used
    (up to ``stale_snapshot_max_s``) until an engine reports."""
    async def scenario():
        new, dispatcher = await _decided_then_restarted(rebuild_wait_s=0.2)
        try:
            first = await dispatcher.decide(call(program_id="p-first"))
            await asyncio.sleep(0.3)  # past the window, still no engine heard from
            late = await dispatcher.decide(call(program_id="p-late"))
            _report(new, "small-0")
            return first, late, await dispatcher.decide(call(program_id="p-after"))
        finally:
            await dispatcher.close()

    first, late, after = asyncio.run(scenario())
    assert first.receipt.stale_snapshot_s > 0 and late.receipt.stale_snapshot_s > 0
    assert after.receipt.stale_snapshot_s == 0 and after.engine.engine_id == "small-0"  # window passed: as it is
