"""The Monitor gRPC servicer over MonitorState. Wall-clock time (unix seconds) is read here, once per call."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import AsyncIterator

import grpc
from prometheus_client import Gauge

from hetflow import wire
from hetflow.core.errors import InvalidArgument, NotFound
from hetflow.core.monitor.memory_ledger import MemoryPlan
from hetflow.core.monitor.snapshot import cluster_snapshot, prefix_matches
from hetflow.core.monitor.state import MonitorState
from hetflow.runtime.batch_streams import answer_in_order, checks_each_message
from hetflow.runtime.interceptors import status_of
from hetflow.runtime.logs import bind_ids, get_logger
from hetflow.v1 import common_pb2, monitor_pb2, monitor_pb2_grpc
from monitor_svc import convert
from monitor_svc.engine_feed import EngineFeed

log = get_logger(__name__)
IN_FLIGHT_TOKENS = Gauge("hetflow_monitor_in_flight_tokens", "Predicted in-flight tokens per engine", ["engine"])
IN_FLIGHT_REQUESTS = Gauge("hetflow_monitor_in_flight_requests", "In-flight requests per engine", ["engine"])
PROGRAMS = Gauge("hetflow_monitor_programs", "Programs in the program table")
RESIDENT_TOKENS = Gauge("hetflow_monitor_resident_tokens",
                        "Contexts of the active programs whose last call went to the engine: what the working-set "
                        "gate counts against its KV (MonitorState.resident), at the last sweep", ["engine"])
RESIDENT_PROGRAMS = Gauge("hetflow_monitor_resident_programs", "Active programs per engine, at the last sweep",
                          ["engine"])
RESIDENT_GROWTH_TOKENS = Gauge("hetflow_monitor_resident_growth_tokens",
                               "What the active programs' contexts will still grow by over their stages to come "
                               "(the gate counts growth_share of it), at the last sweep", ["engine"])
PER_ENGINE_GAUGES = (IN_FLIGHT_TOKENS, IN_FLIGHT_REQUESTS, RESIDENT_TOKENS, RESIDENT_PROGRAMS, RESIDENT_GROWTH_TOKENS)


COMPLETED = "completed"
"""The release reason that completes a call (``Complete``); any other cancels it (``Cancel``)."""
MAX_BATCH = 256
"""Calls one ``Snapshots``, ``AdmitBatch`` or ``ReleaseStream`` batch may carry."""


def _check_batch(size: int, what: str) -> None:
    if size > MAX_BATCH:
        raise InvalidArgument(f"{size} {what} in one batch; at most {MAX_BATCH}")


class MonitorServicer(monitor_pb2_grpc.MonitorServicer):
    def __init__(self, state: MonitorState, watch_interval_s: float = 0.02) -> None:
        """``watch_interval_s``: how often a watching balancer is sent the engines that changed."""
        self.state = state
        self.reports = wire.ReportProtos()
        self.watch_interval_s = watch_interval_s

    async def Admit(self, request: monitor_pb2.AdmitRequest,
                    context: grpc.aio.ServicerContext) -> monitor_pb2.AdmitReply:
        bind_ids(request.request_id, request.program_id)
        return self._admit(request, time.time())

    async def AdmitBatch(self, request: monitor_pb2.AdmitBatchRequest,
                         context: grpc.aio.ServicerContext) -> monitor_pb2.AdmitBatchReply:
        _check_batch(len(request.admits), "admits")
        now_s, reply = time.time(), monitor_pb2.AdmitBatchReply()
        for admit in request.admits:
            outcome = reply.outcomes.add()
            try:
                outcome.reply.CopyFrom(self._admit(admit, now_s))
            except Exception as exc:  # noqa: BLE001 - each admit answers as Admit would (ValueError: bad input)
                code, outcome.details = status_of(exc)
                outcome.code = code.value[0]
        return reply

    @checks_each_message
    async def AdmitStream(self, requests: AsyncIterator[monitor_pb2.AdmitBatchRequest],
                          context: grpc.aio.ServicerContext) -> AsyncIterator[monitor_pb2.AdmitBatchReply]:
        """AdmitBatch on one stream, each batch answered in order (``hetflow.runtime.batch_streams``)."""
        async for reply in answer_in_order(requests, lambda r: self.AdmitBatch(r, context),
                                           monitor_pb2.AdmitBatchReply, context):
            yield reply

    def _admit(self, request: monitor_pb2.AdmitRequest, now_s: float) -> monitor_pb2.AdmitReply:
        try:
            program = self.state.admit(
                request.request_id, request.program_id, request.model, request.engine_id, request.predicted_tokens,
                now_s, workflow=request.workflow.workflow, deadline_unix_s=request.workflow.deadline_unix_s,
                predicted_cost_s=request.predicted_cost_s, agent=request.workflow.agent,
                upstream_agent=request.workflow.upstream_agent,
                memory_plan=MemoryPlan(request.prompt_tokens, request.decode_tokens_per_s, request.expected_s)
                if request.expected_s > 0 else None,
                stage_index=request.workflow.stage_index, mean_cost_s=request.mean_cost_s,
                prefix_blocks=tuple(request.prefix_blocks), prompt_tokens=request.prompt_tokens,
                reregister=request.reregister, stage_count=request.workflow.stage_count,
                retain_kv_s=request.retain_kv_s if request.HasField("retain_kv_s") else None,
                via_gateway=request.via_gateway, stages_inferred=request.stages_inferred,
                one_call=request.workflow.identity_source == "none", within_kv=request.within_kv,
                working_set_room=convert.working_set_room(request))
        except KeyError as exc:
            raise NotFound(exc.args[0]) from exc
        self._observe(request.engine_id)
        return monitor_pb2.AdmitReply(program_model=program.model, admit_seq=self.state.admit_seq,
                                      monitor_epoch=self.state.epoch)

    async def Complete(self, request: monitor_pb2.ReleaseRequest,
                       context: grpc.aio.ServicerContext) -> monitor_pb2.ReleaseReply:
        return self._release(request, completed=True)

    async def Cancel(self, request: monitor_pb2.ReleaseRequest,
                     context: grpc.aio.ServicerContext) -> monitor_pb2.ReleaseReply:
        return self._release(request, completed=False)

    @checks_each_message
    async def ReleaseStream(self, requests: AsyncIterator[monitor_pb2.ReleaseBatchRequest],
                            context: grpc.aio.ServicerContext) -> AsyncIterator[monitor_pb2.ReleaseBatchReply]:
        """Complete and Cancel on one stream, a batch a message (``hetflow.runtime.batch_streams``)."""
        async def answer(batch: monitor_pb2.ReleaseBatchRequest) -> monitor_pb2.ReleaseBatchReply:
            _check_batch(len(batch.releases), "releases")
            return monitor_pb2.ReleaseBatchReply(replies=[self._release(r, completed=r.reason == COMPLETED)
                                                          for r in batch.releases])
        async for reply in answer_in_order(requests, answer,
                                           monitor_pb2.ReleaseBatchReply, context):
            yield reply

    async def ReportEngineStatus(self, request: common_pb2.EngineStatus,
                                 context: grpc.aio.ServicerContext) -> monitor_pb2.ReportReply:
        orphans = self.state.report(wire.engine_status_from_proto(request), time.time())
        if orphans:
            log.warning("orphans_removed", engine=request.engine_id, count=orphans)
        self._observe(request.engine_id)
        return monitor_pb2.ReportReply(orphans_removed=orphans, monitor_epoch=self.state.epoch,
                                       engine_stale_after_s=self.state.limits.engine_stale_after_s)

    @checks_each_message
    async def ReportStream(self, requests: AsyncIterator[common_pb2.EngineStatus],
                           context: grpc.aio.ServicerContext) -> AsyncIterator[monitor_pb2.ReportReply]:
        """ReportEngineStatus on one stream, a status a message (``hetflow.runtime.batch_streams``): an
        engine pays gRPC's per-call cost once, not at every report."""
        async for reply in answer_in_order(requests, lambda r: self.ReportEngineStatus(r, context),
                                           monitor_pb2.ReportReply, context, max_in_flight=1):
            yield reply

    async def ReportEngineFailure(self, request: monitor_pb2.EngineFailure,
                                  context: grpc.aio.ServicerContext) -> monitor_pb2.ReportReply:
        if not self.state.engine_unreachable(request.engine_id, request.reason):
            raise NotFound(f"engine {request.engine_id!r} is not known to the monitor")
        log.warning("engine_unreachable", engine=request.engine_id, reason=request.reason)
        return monitor_pb2.ReportReply()

    async def Snapshot(self, request: monitor_pb2.SnapshotRequest,
                       context: grpc.aio.ServicerContext) -> monitor_pb2.MonitorSnapshot:
        return self._snapshot(request, time.time())

    async def Snapshots(self, request: monitor_pb2.SnapshotsRequest,
                        context: grpc.aio.ServicerContext) -> monitor_pb2.SnapshotsReply:
        """Taken at one instant, so the engines' views are built once for all of them (``engine_views``)."""
        _check_batch(len(request.calls), "calls")
        now_s = time.time()
        return monitor_pb2.SnapshotsReply(snapshots=[self._snapshot(call, now_s) for call in request.calls])

    @checks_each_message
    async def SnapshotsStream(self, requests: AsyncIterator[monitor_pb2.SnapshotsRequest],
                              context: grpc.aio.ServicerContext) -> AsyncIterator[monitor_pb2.SnapshotsReply]:
        """Snapshots on one stream, each batch answered in order (``hetflow.runtime.batch_streams``)."""
        async for reply in answer_in_order(requests, lambda r: self.Snapshots(r, context),
                                           monitor_pb2.SnapshotsReply, context):
            yield reply

    async def WatchEngines(self, request: monitor_pb2.WatchEnginesRequest,
                           context: grpc.aio.ServicerContext) -> AsyncIterator[monitor_pb2.EngineChanges]:
        """Every engine's load, then those that changed, once per ``watch_interval_s`` at most
        (``monitor_svc.engine_feed``), until the balancer goes."""
        feed, changed = EngineFeed(request.in_flight_calls), asyncio.Event()
        self.state.on_change.append(changed.set)
        try:
            while True:
                message = feed.changes(self.state, self.reports, time.time())
                if message is not None:
                    yield message
                await asyncio.sleep(self.watch_interval_s)
                changed.clear()
                if (idle_s := feed.idle_for_s(self.state, time.time())) > 0:  # wait for a change, or the clock
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(idle_s):
                            await changed.wait()
        finally:
            self.state.on_change.remove(changed.set)

    def _snapshot(self, request: monitor_pb2.SnapshotRequest, now_s: float) -> monitor_pb2.MonitorSnapshot:
        """The call's snapshot; with ``without_engines``, its own part and each engine's prefix match."""
        prefix_blocks = tuple(request.prefix_blocks)
        snapshot = cluster_snapshot(self.state, now_s, request.program_id, request.agent, request.workflow,
                                    request.stage_index, request.stage_count, prefix_blocks,
                                    request.in_flight_calls, request.upstream_agent,
                                    with_engines=not request.without_engines)
        reply = wire.snapshot_to_proto(snapshot, self.state.engines, self.state.admit_seq, self.reports,
                                       request.request_ids)
        reply.monitor_epoch = self.state.epoch
        if request.without_engines:
            if prefix_blocks:
                reply.prefix_match_blocks.update(prefix_matches(self.state, prefix_blocks))
            reply.engine_count = len(self.state.engines)
            reply.healthy_engine_count = sum(self.state.is_healthy(r, now_s) for r in self.state.engines.values())
        return reply

    async def GetProgram(self, request: monitor_pb2.GetProgramRequest,
                         context: grpc.aio.ServicerContext) -> monitor_pb2.ProgramEntry:
        if not request.program_id:
            raise InvalidArgument("program_id is required")
        program = self.state.programs.get(request.program_id)
        if program is None:
            raise NotFound(f"program {request.program_id!r} is not in the program table")
        return convert.program_to_proto(program)

    def refresh_anchor_distances(self) -> None:
        distances = self.state.refresh_anchor_distances()
        log.info("agent_anchor_distances",  # one field: the agents are the clients' names, not the log's keys
                 distances={a: round(d, 3) for a, d in sorted(distances.items(), key=lambda x: x[1])})

    def sweep(self) -> None:
        """The state's sweep, then every engine's gauges: the in-flight ones too (the sweep drops the entries
        of silent engines), and none left for an engine the sweep forgot (only the sweep forgets one)."""
        now_s, before = time.time(), set(self.state.engines)
        result = self.state.sweep(now_s)
        if result["entries_dropped"]:
            log.warning("failed_engines_swept", **result)
        PROGRAMS.set(len(self.state.programs))
        for engine_id, record in self.state.engines.items():
            self._observe(engine_id)
            resident = self.state.resident(record, now_s)
            RESIDENT_TOKENS.labels(engine_id).set(resident.tokens)
            RESIDENT_PROGRAMS.labels(engine_id).set(resident.programs)
            RESIDENT_GROWTH_TOKENS.labels(engine_id).set(resident.growth_tokens)
        for gone in before - self.state.engines.keys():
            for gauge in PER_ENGINE_GAUGES:
                with contextlib.suppress(KeyError):  # an engine that reported but never had a call
                    gauge.remove(gone)

    def _release(self, request: monitor_pb2.ReleaseRequest, completed: bool) -> monitor_pb2.ReleaseReply:
        bind_ids(request.request_id)
        entry = self.state.entries.get(request.request_id)
        found = self.state.release(request.request_id, time.time(), request.output_tokens, completed,
                                   started_s=request.started_unix_s)
        if entry is not None:
            self._observe(entry.engine_id)
        return monitor_pb2.ReleaseReply(found=found)

    def _observe(self, engine_id: str) -> None:
        record = self.state.engines.get(engine_id)
        if record is not None:
            IN_FLIGHT_TOKENS.labels(engine_id).set(record.in_flight_tokens)
            IN_FLIGHT_REQUESTS.labels(engine_id).set(len(record.in_flight))
