"""A decision's snapshot and admit go to the monitor with the others of their loop turn, each caller still
getting its own answer or status; the batches go on one stream each, by the unary batch methods to a monitor
without the streams, and call by call to one without either."""

import asyncio

import grpc
import pytest

from balancer_svc.monitor_batches import MonitorBatches
from hetflow.v1 import monitor_pb2
from tests.factories import StreamedCall


def _failure(code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), "test")


class Monitor:
    """Records what it was asked; ``batches``: whether it has the batch methods, ``streams`` whether it has
    their streams (an older monitor has neither, or the batch methods only)."""

    def __init__(self, batches: bool = True, streams: bool | None = None) -> None:
        self.asked: list[tuple[str, int]] = []
        self.batches = batches
        self.streams = batches if streams is None else streams

    async def Snapshot(self, request, timeout):
        self.asked.append(("Snapshot", 1))
        return monitor_pb2.MonitorSnapshot(program_model=f"model-of-{request.program_id}")

    async def Admit(self, request, timeout):
        self.asked.append(("Admit", 1))
        if request.engine_id == "gone":
            raise _failure(grpc.StatusCode.NOT_FOUND)
        return monitor_pb2.AdmitReply(admit_seq=len(self.asked))

    async def Snapshots(self, request, timeout):
        return self._snapshots(request, "Snapshots")

    async def AdmitBatch(self, request, timeout):
        return self._admit_batch(request, "AdmitBatch")

    def SnapshotsStream(self):
        async def answer(request, timeout):
            return self._snapshots(request, "SnapshotsStream")
        return StreamedCall(answer, monitor_pb2.SnapshotsReply, unimplemented=not self.streams)

    def AdmitStream(self):
        async def answer(request, timeout):
            return self._admit_batch(request, "AdmitStream")
        return StreamedCall(answer, monitor_pb2.AdmitBatchReply, unimplemented=not self.streams)

    def _snapshots(self, request, how):
        if not self.batches:
            raise _failure(grpc.StatusCode.UNIMPLEMENTED)
        self.asked.append((how, len(request.calls)))
        return monitor_pb2.SnapshotsReply(snapshots=[
            monitor_pb2.MonitorSnapshot(program_model=f"model-of-{c.program_id}") for c in request.calls])

    def _admit_batch(self, request, how):
        if not self.batches:
            raise _failure(grpc.StatusCode.UNIMPLEMENTED)
        self.asked.append((how, len(request.admits)))
        return monitor_pb2.AdmitBatchReply(outcomes=[
            monitor_pb2.AdmitOutcome(code=grpc.StatusCode.NOT_FOUND.value[0], details="no engine 'gone'")
            if a.engine_id == "gone" else monitor_pb2.AdmitOutcome(reply=monitor_pb2.AdmitReply(admit_seq=i + 1))
            for i, a in enumerate(request.admits)])


def _admits(*engines: str) -> list[monitor_pb2.AdmitRequest]:
    return [monitor_pb2.AdmitRequest(request_id=f"r{i}", engine_id=e) for i, e in enumerate(engines)]


@pytest.mark.parametrize("batches,streams", [(True, True), (True, False), (False, False)])
def test_each_caller_gets_its_own_snapshot_and_its_own_admit_status(batches, streams):
    async def scenario():
        monitor = Monitor(batches, streams)
        client = MonitorBatches(lambda: monitor, 1.0)
        snapshots = await asyncio.gather(*(client.snapshot(monitor_pb2.SnapshotRequest(program_id=p))
                                           for p in ("a", "b", "c")))
        admits = await asyncio.gather(*(client.admit(a) for a in _admits("e0", "gone", "e1")),
                                      return_exceptions=True)
        later = await client.snapshot(monitor_pb2.SnapshotRequest(program_id="d"))
        return monitor.asked, snapshots, admits, later

    asked, snapshots, admits, later = asyncio.run(scenario())
    assert [s.program_model for s in snapshots] == ["model-of-a", "model-of-b", "model-of-c"]
    assert later.program_model == "model-of-d"
    assert isinstance(admits[1], grpc.aio.AioRpcError) and admits[1].code() == grpc.StatusCode.NOT_FOUND
    assert all(isinstance(a, monitor_pb2.AdmitReply) for a in (admits[0], admits[2]))
    if streams:
        assert asked == [("SnapshotsStream", 3), ("AdmitStream", 3), ("SnapshotsStream", 1)]
    elif batches:  # a monitor without the streams: their unary batch methods
        assert asked == [("Snapshots", 3), ("AdmitBatch", 3), ("Snapshots", 1)]
    else:  # the first refusal of a batch method turns batches off: the rest go call by call
        assert asked == [("Snapshot", 1)] * 3 + [("Admit", 1)] * 3 + [("Snapshot", 1)]


def test_a_monitor_away_fails_every_caller_of_the_batch_with_its_status():
    class Away(Monitor):
        def _snapshots(self, request, how):
            raise _failure(grpc.StatusCode.UNAVAILABLE)

    async def scenario():
        client = MonitorBatches(lambda: Away(), 1.0)
        return await asyncio.gather(*(client.snapshot(monitor_pb2.SnapshotRequest()) for _ in range(2)),
                                    return_exceptions=True)

    assert all(isinstance(e, grpc.aio.AioRpcError) and e.code() == grpc.StatusCode.UNAVAILABLE
               for e in asyncio.run(scenario()))


def test_a_new_monitor_process_is_asked_in_batches_again():
    async def scenario():
        monitor = Monitor(batches=False)
        client = MonitorBatches(lambda: monitor, 1.0)
        await client.snapshot(monitor_pb2.SnapshotRequest(program_id="a"))  # refused once: call by call
        monitor.batches = monitor.streams = True  # upgraded and restarted
        await client.snapshot(monitor_pb2.SnapshotRequest(program_id="b"))
        client.monitor_restarted()
        await asyncio.gather(*(client.snapshot(monitor_pb2.SnapshotRequest(program_id=p)) for p in ("c", "d")))
        return monitor.asked

    assert asyncio.run(scenario()) == [("Snapshot", 1), ("Snapshot", 1), ("SnapshotsStream", 2)]


def test_asked_call_by_call_one_failing_snapshot_fails_only_its_caller():
    class Older(Monitor):
        async def Snapshot(self, request, timeout):
            if request.program_id == "bad":
                raise _failure(grpc.StatusCode.INVALID_ARGUMENT)
            return await super().Snapshot(request, timeout)

    async def scenario():
        client = MonitorBatches(lambda: Older(batches=False), 1.0)
        return await asyncio.gather(*(client.snapshot(monitor_pb2.SnapshotRequest(program_id=p))
                                      for p in ("good", "bad")), return_exceptions=True)

    good, bad = asyncio.run(scenario())
    assert good.program_model == "model-of-good" and bad.code() == grpc.StatusCode.INVALID_ARGUMENT
