"""The monitor's per-call questions of a decision, snapshot and admit, batched per turn of the event loop.

Each decision asks the monitor for its snapshot and then admits the call. The calls deciding in one turn
share one ``Monitor.Snapshots`` and one ``Monitor.AdmitBatch`` (``hetflow.runtime.coalescing``), so under
load the balancer and the monitor pay gRPC's per-call cost once per turn, and the monitor builds the
engines' views once for all of them. The batches go as messages on one long-lived stream each
(``SnapshotsStream``, ``AdmitStream``: ``hetflow.runtime.batch_streams``), so a batch does not pay for a
call of its own either. Each caller still gets what ``Snapshot`` or ``Admit`` would have answered it: the
snapshot for its call, or its own admit's status as an ``AioRpcError``. A monitor that predates the
streams is asked by the unary batch methods, and one that predates those (UNIMPLEMENTED) call by call,
until a new monitor process answers, so the balancer can be upgraded first.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Sequence, TypeVar

import grpc

from hetflow.runtime.batch_streams import STATUS_OF_CODE, BatchStream
from hetflow.runtime.coalescing import Coalescer, rejected
from hetflow.runtime.interceptors import rpc_error
from hetflow.runtime.logs import get_logger
from hetflow.v1 import monitor_pb2, monitor_pb2_grpc

log = get_logger(__name__)

AnswerT = TypeVar("AnswerT")
BATCH_ITEMS = 64
"""Calls one batch carries, at most (the monitor takes up to 256)."""
async def _snapshots_of(reply: Awaitable[monitor_pb2.SnapshotsReply]) -> Sequence[monitor_pb2.MonitorSnapshot]:
    return (await reply).snapshots


async def _outcomes_of(reply: Awaitable[monitor_pb2.AdmitBatchReply]) -> Sequence[monitor_pb2.AdmitOutcome]:
    return (await reply).outcomes


class MonitorBatches:
    """``snapshot`` and ``admit`` of one call each, sent in batches; ``monitor`` gives the current stub."""

    def __init__(self, monitor: Callable[[], monitor_pb2_grpc.MonitorStub], timeout_s: float) -> None:
        self._monitor, self._timeout_s = monitor, timeout_s
        self._batches = True
        """False once the monitor answered UNIMPLEMENTED to a batch method: asked call by call."""
        self._snapshot_stream: BatchStream[monitor_pb2.SnapshotsRequest, monitor_pb2.SnapshotsReply] = BatchStream(
            lambda: self._monitor().SnapshotsStream(), "monitor.SnapshotsStream", timeout_s)
        self._admit_stream: BatchStream[monitor_pb2.AdmitBatchRequest, monitor_pb2.AdmitBatchReply] = BatchStream(
            lambda: self._monitor().AdmitStream(), "monitor.AdmitStream", timeout_s)
        self._snapshots: Coalescer[monitor_pb2.SnapshotRequest, monitor_pb2.MonitorSnapshot] = Coalescer(
            self._snapshot_batch, BATCH_ITEMS, "monitor.Snapshots", rejected)
        self._admits: Coalescer[monitor_pb2.AdmitRequest, monitor_pb2.AdmitOutcome] = Coalescer(
            self._admit_batch, BATCH_ITEMS, "monitor.AdmitBatch", rejected)

    def monitor_restarted(self) -> None:
        """A new monitor process answered: it may have the batch methods its predecessor lacked."""
        self._batches = True
        for stream in (self._snapshot_stream, self._admit_stream):
            stream.service_restarted()

    async def close(self) -> None:
        for stream in (self._snapshot_stream, self._admit_stream):
            await stream.close()

    async def snapshot(self, request: monitor_pb2.SnapshotRequest) -> monitor_pb2.MonitorSnapshot:
        """The snapshot ``Snapshot`` would answer for this call."""
        if not self._batches:
            return await self._monitor().Snapshot(request, timeout=self._timeout_s)
        return await self._snapshots.ask(request)

    async def admit(self, request: monitor_pb2.AdmitRequest) -> monitor_pb2.AdmitReply:
        """The admit's reply; its refusal raised as the ``AioRpcError`` ``Admit`` would have ended with."""
        if not self._batches:
            return await self._monitor().Admit(request, timeout=self._timeout_s)
        outcome = await self._admits.ask(request)
        if outcome.code:
            raise rpc_error(STATUS_OF_CODE.get(outcome.code, grpc.StatusCode.UNKNOWN), outcome.details)
        return outcome.reply

    async def _snapshot_batch(self, requests: list[monitor_pb2.SnapshotRequest]
                              ) -> Sequence[monitor_pb2.MonitorSnapshot | BaseException]:
        monitor, batch = self._monitor(), monitor_pb2.SnapshotsRequest(calls=requests)
        return await self._batched_or_each(
            lambda: _snapshots_of(self._snapshot_stream.ask_or(
                batch, lambda: monitor.Snapshots(batch, timeout=self._timeout_s))),
            lambda: asyncio.gather(*(monitor.Snapshot(r, timeout=self._timeout_s) for r in requests),
                                   return_exceptions=True))

    async def _admit_batch(self, admits: list[monitor_pb2.AdmitRequest]) -> Sequence[monitor_pb2.AdmitOutcome]:
        monitor, batch = self._monitor(), monitor_pb2.AdmitBatchRequest(admits=admits)
        return await self._batched_or_each(
            lambda: _outcomes_of(self._admit_stream.ask_or(
                batch, lambda: monitor.AdmitBatch(batch, timeout=self._timeout_s))),
            lambda: asyncio.gather(*(self._admit_alone(monitor, a) for a in admits)))

    async def _batched_or_each(self, batched: Callable[[], Awaitable[Sequence[AnswerT]]],
                               each: Callable[[], Awaitable[Sequence[AnswerT]]]) -> Sequence[AnswerT]:
        """The batch's answers (on its stream, or by the unary batch method from a monitor without the
        stream); the single method's, call by call, from a monitor without either (UNIMPLEMENTED)."""
        if self._batches:
            try:
                return await batched()
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                    raise
                self._unbatched()
        return await each()

    async def _admit_alone(self, monitor: monitor_pb2_grpc.MonitorStub,
                           admit: monitor_pb2.AdmitRequest) -> monitor_pb2.AdmitOutcome:
        try:
            return monitor_pb2.AdmitOutcome(reply=await monitor.Admit(admit, timeout=self._timeout_s))
        except grpc.aio.AioRpcError as exc:
            return monitor_pb2.AdmitOutcome(code=exc.code().value[0], details=exc.details() or "")

    def _unbatched(self) -> None:
        if self._batches:
            self._batches = False
            log.warning("monitor_without_batches", fallback="one Snapshot and one Admit per call")
