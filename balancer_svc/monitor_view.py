"""The balancer's side of the monitor, the one source of truth for in-flight work: each decision's
snapshot (its engines from the watch while it is live, ``EngineWatch``; the last whole snapshot while
the monitor does not answer or a restarted one rebuilds), admits and
releases of the calls this balancer placed, their re-registration with a restarted monitor, and the
engines this balancer skips (unreachable lately, failed a call before its first token, outside a
gateway's subset).

Any number of balancers share one monitor: each counts its own admits not yet in a snapshot
(``PendingAdmits``) on top of what the monitor says.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import OrderedDict
from typing import Mapping

import grpc
from prometheus_client import Counter

from balancer_svc.config import BalancerConfig
from balancer_svc.engine_watch import EngineFacts, EngineWatch, Watched, facts_of
from balancer_svc.monitor_batches import MonitorBatches
from balancer_svc.pending import PendingAdmits
from balancer_svc.registrations import Registrations
from hetflow import wire
from hetflow.core.call import LlmCall
from hetflow.core.errors import Aborted, Unavailable
from hetflow.core.snapshot import ClusterSnapshot, view_with
from hetflow.runtime.logs import get_logger
from hetflow.runtime.releases import MonitorReleases
from hetflow.v1 import common_pb2, monitor_pb2, monitor_pb2_grpc

log = get_logger(__name__)
PROGRAM_HINTS = 65536
"""Programs whose assigned model a balancer remembers, to skip the router for their later calls."""
MONITOR_AWAY = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
"""The monitor's failures that mean it is not answering (restarting, starved), not that the call is bad."""
STALE_DECISIONS = Counter("hetflow_balancer_stale_snapshot_decisions_total",
                          "Decisions taken on the last snapshot while the monitor did not answer")
LATE_ENGINE_DECISIONS = Counter("hetflow_balancer_late_engine_decisions_total",
                                "Decisions that used engines whose reports were late, none being on time")
SeenSnapshot = tuple[ClusterSnapshot, int, float]
"""What a decision is taken on: the snapshot, the monitor's ``admit_seq`` its engines include, and how
old it is (seconds; 0 when the monitor answered for this call)."""


class _MonitorAway(Exception):
    """The monitor did not answer (restarting, starved): the call is decided on the last snapshot."""


class MonitorView:
    def __init__(self, cfg: BalancerConfig, monitor: monitor_pb2_grpc.MonitorStub, reads_prefix: bool,
                 reads_in_flight_calls: bool) -> None:
        """``reads_prefix``, ``reads_in_flight_calls``: what the engine picker reads, asked of the monitor
        with each snapshot."""
        self.cfg = cfg
        self.monitor = monitor
        self.reads_prefix, self.reads_in_flight_calls = reads_prefix, reads_in_flight_calls
        self.monitor_batches = MonitorBatches(lambda: self.monitor, cfg.dependency_timeout_s)
        """Each decision's snapshot and admit, batched with the others of its loop turn."""
        self.releases = MonitorReleases(lambda: self.monitor, cfg.dependency_timeout_s)
        self.pending = PendingAdmits(horizon_s=4 * cfg.dependency_timeout_s)
        self.profiles = wire.ProfileMemo()
        self.engine_watch = EngineWatch(lambda: self.monitor, reads_in_flight_calls, self.profiles)
        self.registrations = Registrations()
        """Running calls and whether the monitor knows them (told again after it restarts)."""
        self._releases: dict[str, asyncio.Task[None]] = {}
        """Releases on their way to the monitor, by request id."""
        self._handed_over: dict[str, asyncio.TimerHandle] = {}
        """Direct-path calls handed to their engines whose registrations are kept until their tickets expire,
        with the timer that forgets them."""
        self._reregistering: asyncio.Task[None] | None = None
        self._last_snapshot: tuple[monitor_pb2.MonitorSnapshot, float] | None = None
        """The monitor's last snapshot and when it came (monotonic s): decided on while it is away, and
        while a restarted monitor rebuilds (``_monitor_answer``)."""
        self._rebuild_started: tuple[str, float] | None = None
        """A restarted monitor's epoch and when it first answered (monotonic s): ``_rebuilding``'s window."""
        self._watcher: asyncio.Task[None] | None = None
        self._unreachable: dict[str, float] = {}
        """Engines this balancer failed to reach, until when (monotonic s) it skips them; the monitor is
        told as well, so every balancer skips them until they report again."""
        self._excluded: dict[str, set[str]] = {}
        """Per running call, the engines that failed it before its first token."""
        self._allowed_endpoints: dict[str, frozenset[str]] = {}
        """Per call being decided for a gateway, the model-server endpoints its subset hint allows."""
        self._program_models: OrderedDict[str, str] = OrderedDict()
        """Programs seen assigned to a model (A[p]), the most recent last, at most ``PROGRAM_HINTS``."""

    def start(self) -> None:
        """Start probing the monitor (``_watch``) and watching its engines; on the server's event loop."""
        self._watcher = asyncio.get_running_loop().create_task(self._watch())
        self.engine_watch.start()

    async def close(self) -> None:
        for timer in self._handed_over.values():
            timer.cancel()
        stopping = [task for task in (self._reregistering, self._watcher) if task is not None]
        for task in stopping:
            task.cancel()
        await asyncio.gather(*stopping, return_exceptions=True)
        if self._releases:
            await asyncio.wait(self._releases.values(), timeout=5.0)
        await self.engine_watch.close()
        await self.monitor_batches.close()
        await self.releases.close()

    def watched_engines(self) -> ClusterSnapshot | None:
        """The engines as the watch last told them (this balancer's own admits since not counted), with
        nothing of any call: enough to tell, before a call's snapshot comes, whether its model choice can
        read the router's confidences. None while the watch is not live."""
        watched = self.engine_watch.current(self._last_snapshot[0].monitor_epoch) if self._last_snapshot else None
        return ClusterSnapshot(time.time(), watched.views) if watched is not None else None

    def knows_program(self, program_id: str) -> bool:
        """Whether this balancer has seen the program assigned to a model (it then needs no router)."""
        return program_id in self._program_models

    async def _watch(self) -> None:
        """Without calls to carry them, a snapshot every ``monitor_probe_s`` keeps the fallback snapshot
        fresh and notices a restarted monitor, whose running calls are then told to it again."""
        while True:
            await asyncio.sleep(self.cfg.monitor_probe_s)
            last_s = self._last_snapshot[1] if self._last_snapshot else -float("inf")
            if time.monotonic() - last_s < self.cfg.monitor_probe_s and not self.registrations.needs_telling():
                continue
            try:
                msg = await self.monitor.Snapshot(monitor_pb2.SnapshotRequest(), timeout=self.cfg.dependency_timeout_s)
            except grpc.aio.AioRpcError:
                continue
            self._monitor_answer(msg)

    async def engine_unreachable(self, engine_id: str, reason: str) -> None:
        """Skip the engine here at once and tell the monitor, which marks it unhealthy for every balancer
        until it reports again."""
        self._unreachable[engine_id] = time.monotonic() + self.cfg.unreachable_skip_s
        try:
            await self.monitor.ReportEngineFailure(monitor_pb2.EngineFailure(engine_id=engine_id, reason=reason),
                                                   timeout=self.cfg.dependency_timeout_s)
        except grpc.aio.AioRpcError as exc:
            log.warning("engine_failure_report_failed", engine=engine_id, code=exc.code().name)

    def exclude(self, request_id: str, engine_ids: set[str]) -> None:
        """The engines ``request_id`` must not be decided onto (those that failed it); empty: none."""
        if engine_ids:
            self._excluded[request_id] = set(engine_ids)
        else:
            self._excluded.pop(request_id, None)

    def engine_status(self, engine_id: str) -> common_pb2.EngineStatus:
        """What the last snapshot said of ``engine_id`` (an empty status when it is not in it): its
        address, its model server's own endpoint."""
        engines = self._last_snapshot[0].engines if self._last_snapshot else ()
        return next((e.status for e in engines if e.status.engine_id == engine_id), common_pb2.EngineStatus())

    def limit_endpoints(self, request_id: str, endpoints: frozenset[str] | None) -> None:
        """Decide ``request_id`` only onto engines whose model-server endpoint is among ``endpoints`` (a
        gateway's subset hint); None lifts the limit."""
        if endpoints is None:
            self._allowed_endpoints.pop(request_id, None)
        else:
            self._allowed_endpoints[request_id] = endpoints

    def least_loaded_endpoint(self, model: str, endpoints: frozenset[str] | None) -> str:
        """The healthy engine of ``model`` with the fewest calls in flight, as its model-server endpoint."""
        engines = [e for e in (self._last_snapshot[0].engines if self._last_snapshot else ())
                   if e.healthy and e.status.model == model and e.status.serving_endpoint
                   and (endpoints is None or e.status.serving_endpoint in endpoints)]
        return min(engines, key=lambda e: (e.in_flight_requests, e.status.engine_id)).status.serving_endpoint \
            if engines else ""

    def hand_over(self, request_id: str, ticket_ttl_s: float) -> None:
        """A direct-path call is the engine's to end once its ticket is used: this balancer stops telling a
        restarted monitor of it when the ticket expires (the engine tells it from then on)."""
        if (earlier := self._handed_over.get(request_id)) is not None:
            earlier.cancel()  # decided again: its new ticket's time runs from now
        self._handed_over[request_id] = asyncio.get_running_loop().call_later(
            ticket_ttl_s, self._forget_handed_over, request_id)

    def _forget_handed_over(self, request_id: str) -> None:
        """Its engine's from now on, in the monitor's count too: this balancer no longer counts it on top of
        its snapshots (an admit the monitor never acknowledged, the monitor away, would otherwise count for
        good, and so would one a monitor restart made unacknowledged again)."""
        self.registrations.remove(request_id)
        self._handed_over.pop(request_id, None)
        self.pending.drop(request_id)

    def running_here(self, request_id: str) -> bool:
        """A call this balancer admitted and runs still: relayed, or decided and not yet handed to its
        engine (a handed-over call's caller may decide it again, its engine out of reach)."""
        return request_id in self.registrations and request_id not in self._handed_over

    async def released(self, request_id: str) -> None:
        """Wait for the release of ``request_id`` on its way to the monitor, if one is."""
        if (releasing := self._releases.get(request_id)) is not None:
            await asyncio.gather(releasing, return_exceptions=True)

    def _decision_view(self, snapshot: ClusterSnapshot, facts: Mapping[str, EngineFacts],
                       request_id: str) -> ClusterSnapshot:
        """The snapshot the call is decided on: the engines this balancer could not reach lately, and
        those that failed this call before, marked unhealthy (``snapshot`` when there are none). When no
        other engine is healthy, engines whose reports are late but that last said they serve (up to
        ``late_engine_max_s``) are used: on a starved host every report is late, and a call sent to an
        engine that is really gone comes back before its first token and goes elsewhere."""
        now_s = time.monotonic()
        for engine_id in [e for e, until_s in self._unreachable.items() if until_s <= now_s]:
            del self._unreachable[engine_id]
        skipped = self._unreachable.keys() | self._excluded.get(request_id, set())
        if (allowed := self._allowed_endpoints.get(request_id)) is not None:
            skipped |= {e for e, f in facts.items() if f.serving_endpoint not in allowed}
        engines = snapshot.engines
        on_time = any(e.healthy for e in engines if e.engine_id not in skipped)
        late = set() if on_time else {e.engine_id for e in engines if not e.healthy and e.engine_id not in skipped
                                      and (f := facts.get(e.engine_id)) is not None and f.serving
                                      and f.age_s(now_s) <= self.cfg.late_engine_max_s}
        if not late and not any(e.engine_id in skipped for e in engines):
            return snapshot
        if late:
            LATE_ENGINE_DECISIONS.inc()
        return dataclasses.replace(snapshot, engines=tuple(
            view_with(e, healthy=False) if e.engine_id in skipped else view_with(e, healthy=True)
            if e.engine_id in late else e for e in engines))

    def _from_whole(self, msg: monitor_pb2.MonitorSnapshot, request_id: str) -> ClusterSnapshot:
        """The call's snapshot from a whole one the monitor sent (its engines in it)."""
        now_s = time.monotonic()
        return self._decision_view(wire.snapshot_from_proto(msg, self.profiles),
                                   {e.status.engine_id: facts_of(e, now_s) for e in msg.engines}, request_id)

    def _from_watch(self, msg: monitor_pb2.MonitorSnapshot, watched: Watched, request_id: str) -> ClusterSnapshot:
        """The call's snapshot from its own part (``without_engines``) and the watched engines, each with
        the call's prefix match."""
        matches = msg.prefix_match_blocks
        engines = watched.views if not matches else tuple(
            view_with(v, prefix_match_blocks=matches[v.engine_id]) if v.engine_id in matches else v
            for v in watched.views)
        return self._decision_view(wire.snapshot_from_proto(msg, self.profiles, engines), watched.facts, request_id)

    def remember_program(self, program_id: str, model: str) -> None:
        """A hint of A[p] (the monitor stays the truth): a program seen assigned needs no router."""
        if program_id:
            self._program_models[program_id] = model
            self._program_models.move_to_end(program_id)
            while len(self._program_models) > PROGRAM_HINTS:
                self._program_models.popitem(last=False)

    async def snapshot(self, call: LlmCall) -> SeenSnapshot:
        """The call's snapshot: its own part from the monitor and the engines from the watch while it is
        live and follows the monitor the last whole snapshot came from; otherwise the monitor's whole
        snapshot; while the monitor does not answer, its last one and how old it is."""
        wf = call.workflow
        watched = self.engine_watch.current(self._last_snapshot[0].monitor_epoch) if self._last_snapshot else None
        request = monitor_pb2.SnapshotRequest(
            program_id=wf.program_id, agent=wf.agent, workflow=wf.workflow, stage_index=wf.stage_index,
            stage_count=wf.stage_count, upstream_agent=wf.upstream_agent,
            prefix_blocks=call.prefix_blocks if self.reads_prefix else (),
            in_flight_calls=self.reads_in_flight_calls, without_engines=watched is not None)
        try:
            msg = await self._ask(request)
            if watched is not None and not watched.agrees_with(msg):  # the engines changed since the watch heard
                watched, request.without_engines = None, False
                msg = await self._ask(request)
        except _MonitorAway as away:
            return self._stale_snapshot(call, str(away))
        if watched is not None:
            self._monitor_answered(msg.monitor_epoch)
            return self._from_watch(msg, watched, call.request_id), watched.admit_seq, 0.0
        if not self._monitor_answer(msg):
            return self._stale_snapshot(call, "restarted, rebuilding from engine reports")
        return self._from_whole(msg, call.request_id), msg.admit_seq, 0.0

    async def _ask(self, request: monitor_pb2.SnapshotRequest) -> monitor_pb2.MonitorSnapshot:
        try:
            return await self.monitor_batches.snapshot(request)
        except grpc.aio.AioRpcError as exc:
            if exc.code() not in MONITOR_AWAY:
                raise Unavailable(f"monitor failed the snapshot: {exc.code().name} {exc.details()}") from exc
            raise _MonitorAway(f"{exc.code().name} {exc.details()}") from exc

    def _monitor_answer(self, msg: monitor_pb2.MonitorSnapshot) -> bool:
        """Take a snapshot the monitor answered, to a call or to the probe: the one place a snapshot
        becomes the fallback that calls are decided on while the monitor is away. A rebuilding
        monitor's is not taken (False), so calls keep deciding on its predecessor's last one."""
        rebuilding = self._rebuilding(msg)
        if not rebuilding:
            self._last_snapshot = (msg, time.monotonic())
        self._monitor_answered(msg.monitor_epoch)
        return not rebuilding

    def _rebuilding(self, msg: monitor_pb2.MonitorSnapshot) -> bool:
        """A restarted monitor (a new epoch) that has not yet heard from every engine its predecessor's
        last snapshot showed healthy, within ``rebuild_wait_s`` of its own first answer: deciding on
        what it knows would find no engine for calls whose engines simply have not reported yet. The
        window runs from the new monitor's first answer, not from its predecessor's last: on a loaded
        host the restart alone can take longer than the window (issue 31, docs/reliability.md)."""
        if self._last_snapshot is None:
            return False
        last, _ = self._last_snapshot
        if msg.monitor_epoch == last.monitor_epoch:
            return False
        now_s = time.monotonic()
        if self._rebuild_started is None or self._rebuild_started[0] != msg.monitor_epoch:
            self._rebuild_started = (msg.monitor_epoch, now_s)
        heard = {e.status.engine_id for e in msg.engines if e.healthy}
        if not heard:  # no engine has reported yet: its view could only fail calls, however long it takes
            return any(e.healthy for e in last.engines)  # (``stale_snapshot_max_s`` bounds the old one's use)
        if now_s - self._rebuild_started[1] > self.cfg.rebuild_wait_s:
            return False
        return any(e.healthy and e.status.engine_id not in heard for e in last.engines)

    def _stale_snapshot(self, call: LlmCall, why: str) -> SeenSnapshot:
        """The last snapshot's cluster-wide part (engines, loads, admit_seq), with what this balancer
        knows of the call's program (its model hint); per-call fields of another call are left out."""
        age_s = time.monotonic() - self._last_snapshot[1] if self._last_snapshot else float("inf")
        if self._last_snapshot is None or age_s > self.cfg.stale_snapshot_max_s:
            raise Unavailable(f"monitor unavailable ({why}) and no snapshot younger "
                              f"than {self.cfg.stale_snapshot_max_s:g}s to decide on")
        last = self._last_snapshot[0]
        stale = monitor_pb2.MonitorSnapshot(
            taken_unix_s=last.taken_unix_s, engines=last.engines, admit_seq=last.admit_seq,
            monitor_epoch=last.monitor_epoch, program_model=self._program_models.get(call.workflow.program_id, ""))
        for engine in stale.engines:
            engine.prefix_match_blocks = 0
        STALE_DECISIONS.inc()
        log.warning("deciding_on_stale_snapshot", age_s=round(age_s, 3), why=why)
        return self._from_whole(stale, call.request_id), stale.admit_seq, max(age_s, 1e-6)

    def admit_later(self, call: LlmCall, admit: monitor_pb2.AdmitRequest) -> asyncio.Task[None]:
        """The call registered at once (so that a second call under its id is refused from now on), its
        admit on a task of its own (``admit``)."""
        self.registrations.add(call.request_id, admit)
        return asyncio.get_running_loop().create_task(self.admit(call, admit))

    async def admit(self, call: LlmCall, admit: monitor_pb2.AdmitRequest) -> None:
        """Chimera Algorithm 1, line 32: I[m*][r.id] = r.predicted_tokens (and A[p] = m*, line 23), with
        HexGen-Flow's cost and Kairos's memory plan (``convert.admit_request``). Runs beside the engine
        request (``stream`` waits for it before the first chunk; the pending overlay counts the call here
        meanwhile). While the monitor does not answer the call still runs, counted by this balancer, and
        is told to the monitor once it answers (``_retell``)."""
        try:
            reply = await self.monitor_batches.admit(admit)
        except grpc.aio.AioRpcError as exc:
            if exc.code() in MONITOR_AWAY or exc.code() == grpc.StatusCode.NOT_FOUND:
                # away, or restarted and not yet told of the engine by its report: told again later
                self.registrations.failed(call.request_id)
                log.warning("admit_deferred", code=exc.code().name, details=exc.details())
                return
            self.pending.drop(call.request_id)
            self.registrations.remove(call.request_id)
            if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
                raise
            if exc.code() == grpc.StatusCode.ABORTED:  # a conditional admit whose room was taken meanwhile
                raise Aborted(exc.details() or "the admit's condition no longer held") from exc
            raise Unavailable(f"monitor admit failed: {exc.code().name} {exc.details()}") from exc
        self._monitor_answered(reply.monitor_epoch)
        self.registrations.registered(call.request_id, reply.monitor_epoch)
        self.pending.acked(call.request_id, reply.admit_seq, time.monotonic())

    def _monitor_answered(self, epoch: str) -> None:
        """The monitor answered: if it restarted, every running call is told again; so is any whose
        admit failed while it was away."""
        if self.registrations.saw_epoch(epoch):
            self.pending.forget_acks()
            self.monitor_batches.monitor_restarted()
            log.warning("monitor_restarted", epoch=epoch, running_calls=len(self.registrations))
        if self.registrations.needs_telling() and (self._reregistering is None or self._reregistering.done()):
            self._reregistering = asyncio.get_running_loop().create_task(self._retell())

    async def _retell(self) -> None:
        """Re-register the running calls the monitor does not know; stops at the first failure (the next
        answer from the monitor starts it again)."""
        told = 0
        for request_id, admit in self.registrations.unregistered():
            if request_id not in self.registrations:
                continue  # ended meanwhile
            try:
                reply = await self.monitor.Admit(admit, timeout=self.cfg.dependency_timeout_s)
            except grpc.aio.AioRpcError as exc:
                log.warning("reregister_failed", code=exc.code().name, details=exc.details(), told=told)
                return
            if request_id not in self.registrations:  # its release may have reached the monitor first
                self.release_later(request_id, 0, "cancelled")
                continue
            self.registrations.registered(request_id, reply.monitor_epoch)
            self.pending.acked(request_id, reply.admit_seq, time.monotonic())
            told += 1
        log.info("calls_reregistered", count=told, epoch=self.registrations.epoch)

    def release_later(self, request_id: str, output_tokens: int, outcome: str, started_unix_s: float = 0.0,
                       admitted: asyncio.Task[None] | None = None) -> asyncio.Task[None]:
        """Remove the in-flight entry off the caller's task, so a cancelled caller cannot skip it; after
        the admit, when one is in flight, so the release cannot overtake it. The release's task, which a
        caller may wait for (``released_before_end``)."""
        self.pending.drop(request_id)
        self.registrations.remove(request_id)
        task = asyncio.get_running_loop().create_task(
            self._release(request_id, output_tokens, outcome, started_unix_s, admitted))
        self._releases[request_id] = task
        task.add_done_callback(lambda _: self._releases.pop(request_id, None))
        return task

    async def _release(self, request_id: str, output_tokens: int, outcome: str, started_unix_s: float,
                       admitted: asyncio.Task[None] | None = None) -> None:
        if admitted is not None:  # ended, however (cancelled or deferred too: release anyway)
            await asyncio.wait({admitted})
            if _refused(admitted):
                return
        await self.releases.release(request_id, output_tokens, outcome, started_unix_s)


def _refused(admitted: asyncio.Task[None]) -> bool:
    """The monitor refused the admit (an id in flight already, a bad call, or room no longer there): it
    holds no entry of this call to release, and may hold another call's under its id (another balancer's).
    Any other failure may have left an entry: that one is released."""
    if admitted.cancelled():
        return False
    failure = admitted.exception()
    return isinstance(failure, Aborted) or (isinstance(failure, grpc.aio.AioRpcError)
                                            and failure.code() == grpc.StatusCode.INVALID_ARGUMENT)


