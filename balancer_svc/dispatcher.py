"""The balancer's request path, one way: (snapshot | router | predictor) -> model -> engine -> priority ->
(engine request | admit) -> stream -> release.

The three fetches run together and the admit runs beside the engine request, so a decision costs
one round trip to the slowest dependency plus the policies. Policies decide; this module only
fetches what they read and carries out what they chose. The router and predictor are advisory: if
either is down the call still goes through on the documented fallback (fastest model; input-length
priority) and the receipt says so. The monitor is not advisory: without it there is no load
picture, so the call fails UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Iterator

import grpc
from google.protobuf.json_format import MessageToDict
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import Counter, Gauge, Histogram

from balancer_svc import convert
from balancer_svc.advisors import Advisors
from balancer_svc.config import BalancerConfig
from balancer_svc.live_alpha import AlphaReplay, LiveAlphaTuning
from balancer_svc.monitor_batches import MonitorBatches
from balancer_svc.pending import PendingAdmits
from balancer_svc.registrations import Registrations
from hetflow import wire
from hetflow.core.admission import TenantLimiter
from hetflow.core.call import LlmCall, stages_unknown, with_stages
from hetflow.core.decision_loop import DecisionLoop, Gathered, HoldLimits
from hetflow.core.errors import DeadlineExceeded, ResourceExhausted, Unavailable
from hetflow.core.load_shedding import LoadShedder, LoopLag
from hetflow.core.pipeline import Pipeline
from hetflow.core.policies import Prediction, Priority, WaitForCapacity
from hetflow.core.snapshot import ClusterSnapshot, EngineView
from hetflow.core.workload_window import WorkloadWindow
from hetflow.runtime.channels import open_channel
from hetflow.runtime.logs import debug_enabled, get_logger
from hetflow.runtime.releases import release
from hetflow.runtime.tickets import TicketIssuer
from hetflow.v1 import (
    balancer_pb2,
    common_pb2,
    engine_pb2,
    monitor_pb2,
    monitor_pb2_grpc,
    predictor_pb2_grpc,
    router_pb2_grpc,
)

log = get_logger(__name__)
PROGRAM_HINTS = 65536
"""Programs whose assigned model a balancer remembers, to skip the router for their later calls."""
DECISIONS = Counter("hetflow_balancer_decisions_total", "Decisions per stage and rule", ["stage", "rule"])
HELD = Counter("hetflow_balancer_held_total", "Decisions deferred because no engine had KV room (Kairos 6)")
STALE_DECISIONS = Counter("hetflow_balancer_stale_snapshot_decisions_total",
                          "Decisions taken on the last snapshot while the monitor did not answer")
LOOP_LAG_S = Gauge("hetflow_balancer_loop_lag_seconds",
                   "How late the balancer's event loop runs timers (median of the last 10 probes, 50 ms apart)")
BURST_ALLOWANCE = Gauge("hetflow_balancer_burst_allowance_calls",
                        "Decide-only calls the balancer would still take while its event loop runs late")
LATE_ENGINE_DECISIONS = Counter("hetflow_balancer_late_engine_decisions_total",
                                "Decisions that used engines whose reports were late, none being on time")
MONITOR_AWAY = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
"""The monitor's failures that mean it is not answering (restarting, starved), not that the call is bad."""
DECISION_S = Histogram("hetflow_balancer_decision_seconds", "Call received -> engine request sent",
                       buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1))


class NeverReached(Exception):
    """The engine failed the call before its first token: it may go to another engine."""

    def __init__(self, engine_id: str, address: str, code: grpc.StatusCode, details: str,
                 retry_after_s: float | None = None) -> None:
        super().__init__(f"engine {engine_id} failed the call before its first token: {code.name} {details}")
        self.engine_id, self.address, self.code, self.retry_after_s = engine_id, address, code, retry_after_s

    @property
    def engine_fault(self) -> bool:
        """The engine itself failed (dead, stopped, unreachable, broken), not just this call there."""
        return self.code != grpc.StatusCode.RESOURCE_EXHAUSTED

    def as_error(self) -> Exception:
        return Unavailable(str(self)) if self.engine_fault else ResourceExhausted(str(self), self.retry_after_s)


@dataclass
class Dispatch:
    """A decided call, ready to send: where, at which priority, and its receipt."""

    model: str
    engine: EngineView
    priority: Priority
    prediction: Prediction
    receipt: balancer_pb2.Receipt
    admit: monitor_pb2.AdmitRequest
    """The monitor's entry for the call, as sent by ``_admit``."""
    program_start_unix_s: float = 0.0
    started_perf_s: float = 0.0
    """When the decision started (perf counter): the receipt's decision_ms runs from here to the send."""
    admitted: asyncio.Task[None] | None = None
    """The monitor's admit, sent beside the engine request; its release waits for it."""
    retain_kv_s: float | None = None
    """How long the engine keeps the program's KV after the call (the retention stage; None: no hold decided)."""
    reserve_output_tokens: int = 0
    """Output tokens the engine keeps KV room for while the call runs (the reserve stage)."""


@dataclass(frozen=True)
class Fetched:
    """What a decision reads, fetched beside each other (``Dispatcher._fetch``)."""

    call: LlmCall
    """The call as decided: with the stages the monitor inferred, if any."""
    snapshot: ClusterSnapshot
    admit_seq: int
    """The monitor's last admit the snapshot counts (``PendingAdmits`` adds the later ones)."""
    stale_s: float
    """How old the snapshot is when the monitor did not answer (0 when it did)."""
    candidates: list[str]
    """The models the call may go to (``Pipeline.candidate_models``), each with a prediction."""
    router_asked: bool
    confidences: tuple[dict[str, float], bool]
    """The router's confidence per model and whether it truncated the prompt (empty when not asked)."""
    predictions: dict[str, tuple[Prediction, str]]


class Dispatcher:
    def __init__(self, cfg: BalancerConfig, alpha_replay: AlphaReplay | None = None) -> None:
        self.cfg = cfg
        self.pipeline = Pipeline(cfg.policy)
        self.decisions = DecisionLoop(self.pipeline, HoldLimits(cfg.max_held_calls, cfg.max_hold_s,
                                                               refuse_past_deadline=True))
        """The decision loop (``hetflow.core.decision_loop``) and its hold queue (Kairos 6)."""
        tunable = cfg.alpha_tuning and self.pipeline.store.alpha is not None
        self.alpha_tuning = (LiveAlphaTuning(self.pipeline.store, cfg.policy, cfg.alpha_window_s, alpha_replay)
                             if tunable and alpha_replay is not None else None)
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._releases: dict[str, asyncio.Task[None]] = {}
        """Releases on their way to the monitor, by request id."""
        self.pending = PendingAdmits(horizon_s=4 * cfg.dependency_timeout_s)
        self.tenants = TenantLimiter.from_mapping(cfg.tenant_limits)
        self.shedder = LoadShedder(cfg.max_calls, cfg.max_loop_lag_s, cfg.decide_burst_calls,
                                   cfg.decide_burst_refill_s)
        self.loop_lag = LoopLag()
        """How late the event loop runs timers (``_measure_loop_lag``)."""
        self._lag_probe: asyncio.Task[None] | None = None
        self.workload = WorkloadWindow(cfg.workload_window_s, cfg.workload_sample)
        """The live workload the re-planner reads (Cascadia 4.4)."""
        self.gateway_calls: set[str] = set()
        """Calls a gateway sends to the model server itself (the endpoint picker): admitted ``via_gateway``."""
        self.tickets = TicketIssuer(cfg.serve.security.ticket_key())
        """Signs each engine request's dispatch ticket (issue 34)."""
        self.registrations = Registrations()
        """Running calls and whether the monitor knows them (told again after it restarts)."""
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
        self._held_calls: dict[str, tuple[LlmCall, asyncio.Future[Dispatch]]] = {}
        self._releaser: asyncio.Task[None] | None = None
        self._retry_after_s = 0.5
        self._served_models: list[str] = []
        """The healthy models of the last snapshot: what the router and predictor are asked about
        beside the next snapshot."""
        self._profiles = wire.ProfileMemo()
        self._program_models: OrderedDict[str, str] = OrderedDict()
        """Programs seen assigned to a model (A[p]), the most recent last, at most ``PROGRAM_HINTS``."""
        self.monitor = monitor_pb2_grpc.MonitorStub(self.channel(cfg.monitor_address))
        self.monitor_batches = MonitorBatches(lambda: self.monitor, cfg.dependency_timeout_s)
        """Each decision's snapshot and admit, batched with the others of its loop turn."""
        self.advisors = Advisors(
            router_pb2_grpc.RouterStub(self.channel(cfg.router_address)) if cfg.router_address else None,
            predictor_pb2_grpc.PredictorStub(self.channel(cfg.predictor_address)) if cfg.predictor_address else None,
            cfg.quantiles, cfg.dependency_timeout_s)

    def start(self) -> None:
        """Start watching the monitor (``_watch_monitor``); on the server's event loop."""
        self._watcher = asyncio.get_running_loop().create_task(self._watch_monitor())
        self._lag_probe = asyncio.get_running_loop().create_task(self._measure_loop_lag())

    async def _measure_loop_lag(self, interval_s: float = 0.05) -> None:
        """Every ``interval_s``: how much later than asked the loop woke this task (0 when it has CPU)."""
        loop = asyncio.get_running_loop()
        while True:
            asked_s = loop.time()
            await asyncio.sleep(interval_s)
            late_s = loop.time() - asked_s - interval_s
            lag_s = self.loop_lag.add(late_s)
            self.shedder.probed(late_s, interval_s)
            LOOP_LAG_S.set(lag_s)
            BURST_ALLOWANCE.set(self.shedder.burst_allowance)

    async def _watch_monitor(self) -> None:
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

    async def close(self) -> None:
        for task in (self._releaser, self._reregistering, self._watcher, self._lag_probe):
            if task is not None:
                task.cancel()
        if self._releases:
            await asyncio.wait(self._releases.values(), timeout=5.0)
        for channel in self._channels.values():
            await channel.close()
        if self.alpha_tuning is not None:
            self.alpha_tuning.close()

    # -- admission -----------------------------------------------------------------------
    @contextlib.contextmanager
    def admission(self, tenant: str, relays: bool = True) -> Iterator[None]:
        """The balancer's own limits (calls at once, event-loop lag, the burst allowance) and the tenant's,
        entered once per client call (a cascade's stages and judge calls run inside one):
        RESOURCE_EXHAUSTED past them. ``relays``: this balancer streams the call's tokens (False: it only
        decides it, ``hetflow.core.load_shedding``)."""
        spent_burst = self.shedder.enter(self.loop_lag.lag_s, relays)
        try:
            self.tenants.enter(tenant, time.monotonic())
        except ResourceExhausted:
            self.shedder.leave(refund_burst=spent_burst)
            raise
        try:
            yield
        finally:
            self.tenants.leave(tenant)
            self.shedder.leave()

    async def answers_health(self, address: str) -> bool:
        """Whether the engine service itself answers (its backend may have failed one call only)."""
        try:
            reply = await health_pb2_grpc.HealthStub(self.channel(address)).Check(
                health_pb2.HealthCheckRequest(), timeout=self.cfg.dependency_timeout_s / 4)
        except grpc.aio.AioRpcError:
            return False
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)

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
        asyncio.get_running_loop().call_later(ticket_ttl_s, self.registrations.remove, request_id)

    async def released(self, request_id: str) -> None:
        """Wait for the release of ``request_id`` on its way to the monitor, if one is."""
        if (releasing := self._releases.get(request_id)) is not None:
            await asyncio.gather(releasing, return_exceptions=True)

    def _decision_view(self, msg: monitor_pb2.MonitorSnapshot, request_id: str) -> monitor_pb2.MonitorSnapshot:
        """The snapshot the call is decided on: a copy with the engines this balancer could not reach
        lately, and those that failed this call before, marked unhealthy (``msg`` when there are none).
        When no other engine is healthy, engines whose reports are late but that last said they serve
        (up to ``late_engine_max_s``) are used: on a starved host every report is late, and a call
        sent to an engine that is really gone comes back before its first token and goes elsewhere."""
        now_s = time.monotonic()
        for engine_id in [e for e, until_s in self._unreachable.items() if until_s <= now_s]:
            del self._unreachable[engine_id]
        skipped = self._unreachable.keys() | self._excluded.get(request_id, set())
        if (allowed := self._allowed_endpoints.get(request_id)) is not None:
            skipped |= {e.status.engine_id for e in msg.engines if e.status.serving_endpoint not in allowed}
        on_time = any(e.healthy for e in msg.engines if e.status.engine_id not in skipped)
        late = set() if on_time else {e.status.engine_id for e in msg.engines if e.status.serving and not e.healthy
                                      and e.status.engine_id not in skipped
                                      and e.status_age_s <= self.cfg.late_engine_max_s}
        if not late and not any(e.status.engine_id in skipped for e in msg.engines):
            return msg
        if late:
            LATE_ENGINE_DECISIONS.inc()
        marked = monitor_pb2.MonitorSnapshot()
        marked.CopyFrom(msg)
        for engine in marked.engines:
            if engine.status.engine_id in skipped:
                engine.healthy = False
            elif engine.status.engine_id in late:
                engine.healthy = True
        return marked

    # -- decide --------------------------------------------------------------------------
    async def decide(self, call: LlmCall) -> Dispatch:
        """Decide; a call no engine of its model has room for is held (Kairos 6) until a round finds it
        room, the client gives up (its gRPC deadline cancels this) or the program's deadline passes."""
        try:
            return await self._decide_once(call)
        except WaitForCapacity as wait:
            return await self._hold(call, wait)

    async def _hold(self, call: LlmCall, wait: WaitForCapacity) -> Dispatch:
        """Wait in the hold queue; each round (``_release_rounds``) decides the held calls again in
        priority order and resolves this call's future once it gets room or fails for good."""
        give_up_s = self.decisions.hold(call, wait, time.time())
        deadline = call.workflow.deadline_unix_s
        outcome: asyncio.Future[Dispatch] = asyncio.get_running_loop().create_future()
        self._held_calls[call.request_id] = (call, outcome)
        self._retry_after_s = wait.retry_after_s
        HELD.inc()
        log.info("held_for_capacity", reason=str(wait), held=len(self.decisions.held))
        if self._releaser is None or self._releaser.done():
            self._releaser = asyncio.get_running_loop().create_task(self._release_rounds())
        try:
            return await asyncio.wait_for(outcome, timeout=give_up_s)
        except TimeoutError as exc:
            if deadline and time.time() >= deadline:
                raise DeadlineExceeded(f"program deadline passed while waiting for KV room: {wait}") from exc
            raise ResourceExhausted(f"no KV room within max_hold_s {self.cfg.max_hold_s:g}s: {wait}",
                                    retry_after_s=max(1.0, wait.retry_after_s)) from exc
        except asyncio.CancelledError:
            if outcome.done() and not outcome.cancelled() and outcome.exception() is None:
                dispatch = outcome.result()  # admitted as its caller gave up: release it
                self.release_later(call.request_id, 0, "cancelled", admitted=dispatch.admitted)
            raise
        finally:
            self.decisions.leave(call.request_id)
            self._held_calls.pop(call.request_id, None)

    async def _release_rounds(self) -> None:
        """A round a slot: every held call, in the hold queue's order, is decided again; each that fits
        goes, the others stay for the next round (Kairos 6). Ends when nothing is held."""
        while self.decisions.held:
            await asyncio.sleep(self._retry_after_s)
            for held in self.decisions.round():
                call, outcome = self._held_calls.get(held.request_id, (None, None))
                if call is None or outcome is None or outcome.done():
                    continue  # its caller gave up
                try:
                    dispatch = await self._decide_once(call)
                except WaitForCapacity:
                    continue
                except Exception as exc:  # noqa: BLE001 - the held caller gets the error, the round goes on
                    if not outcome.done():
                        outcome.set_exception(exc)
                    continue
                self.decisions.leave(held.request_id)
                if outcome.done():  # the caller gave up while this round admitted it: nothing may linger
                    self.release_later(call.request_id, 0, "cancelled", admitted=dispatch.admitted)
                else:
                    outcome.set_result(dispatch)

    async def _decide_once(self, call: LlmCall) -> Dispatch:
        """Chimera Algorithm 1. Fetches first, the snapshot, the router and the predictor together
        (``_fetch``), then decides (hetflow.core.pipeline) and records the decision without yielding,
        so concurrent calls see each other."""
        start = time.perf_counter()
        fetched = await self._fetch(call)
        call, snapshot, stale_s = fetched.call, fetched.snapshot, fetched.stale_s
        confidence, truncated = fetched.confidences

        # From here to the pending entry: no await, so no other decision interleaves.
        view = self.pending.apply(snapshot, fetched.admit_seq, time.monotonic())
        decision = self.decisions.decide(Gathered(call, view, fetched.candidates, fetched.router_asked, confidence,
                                                  fetched.predictions, truncated))
        engine = next(e for e in view.engines if e.engine_id == decision.engine_id)
        self.pending.add(call.request_id, engine.engine_id, decision.prediction.median_tokens,
                         decision.predicted_cost_s, decision.memory_plan, call.input_tokens, time.time())

        admit = convert.admit_request(call, decision)
        admit.via_gateway = call.request_id in self.gateway_calls
        admitted = asyncio.get_running_loop().create_task(self._admit(call, admit))
        receipt = balancer_pb2.Receipt(
            request_id=call.request_id, program_id=call.workflow.program_id, model=decision.model,
            engine_id=engine.engine_id, priority=decision.priority.key, priority_tiebreak=decision.priority.tiebreak,
            predicted_tokens=decision.prediction.median_tokens, workflow=wire.workflow_to_proto(call.workflow),
            snapshot_unix_s=snapshot.taken_unix_s, stale_snapshot_s=stale_s,
            stages=[convert.stage_to_proto(s.stage, s.plugin, s.choice, s.elapsed_ms) for s in decision.stages])
        if snapshot.inferred_stages is not None:
            receipt.inferred_stages.CopyFrom(wire.stage_inference_to_proto(snapshot.inferred_stages))
        for s in decision.stages:
            DECISIONS.labels(s.stage, s.choice.rule).inc()
        return Dispatch(decision.model, engine, decision.priority, decision.prediction, receipt, admit,
                        snapshot.program_start_s, start, admitted, decision.retain_kv_s,
                        decision.reserve_output_tokens)

    async def _fetch(self, call: LlmCall) -> Fetched:
        """The call, the snapshot, the router's confidences and the predictions, in one round trip's time:
        the router and predictor are asked beside the snapshot for the models the last snapshot served
        (and the router only for a program this balancer has not seen assigned), then whatever the
        snapshot shows they missed is asked after it. The first call, with no snapshot seen yet, fetches
        in two steps; so does a call of a program that names no stage position or count, which the
        snapshot infers (Kairos 4.2) before the predictor reads them. The call returned is the one decided:
        with the inferred stages, if any."""
        first = None
        if stages_unknown(call):
            first = await self._snapshot(call)
            inferred = first[0].inferred_stages if first[0].HasField("inferred_stages") else None
            if inferred is not None and inferred.stage_index:
                call = with_stages(call, inferred.stage_index, inferred.stage_count)
        guess = [call.model_pin] if call.model_pin else self._served_models
        ask_router = bool(guess) and self.pipeline.needs_router(call, guess) and \
            call.workflow.program_id not in self._program_models
        (snapshot_msg, stale_s), scored, predictions = await asyncio.gather(
            self._snapshot(call) if first is None else _ready(first),
            self.advisors.score(call) if ask_router else _none(),
            self.advisors.predict(call, guess) if guess else _no_predictions())
        snapshot = wire.snapshot_from_proto(snapshot_msg, self._profiles)
        self._served_models = snapshot.healthy_models()
        candidates, router_asked = self.decisions.candidates(call, snapshot)
        missing = [m for m in candidates if m not in predictions]
        if (router_asked and not ask_router) or missing:
            late_scored, late = await asyncio.gather(self.advisors.score(call) if router_asked and not ask_router
                                                     else _none(), self.advisors.predict(call, missing) if missing
                                                     else _no_predictions())
            scored = late_scored if router_asked and not ask_router else scored
            predictions = {**predictions, **late}
        if snapshot.program_model:
            self._remember_program(call.workflow.program_id, snapshot.program_model)
        return Fetched(call, snapshot, snapshot_msg.admit_seq, stale_s, candidates, router_asked,
                       scored if router_asked else ({}, False), predictions)

    def _remember_program(self, program_id: str, model: str) -> None:
        """A hint of A[p] (the monitor stays the truth): a program seen assigned needs no router."""
        if program_id:
            self._program_models[program_id] = model
            self._program_models.move_to_end(program_id)
            while len(self._program_models) > PROGRAM_HINTS:
                self._program_models.popitem(last=False)

    async def _snapshot(self, call: LlmCall) -> tuple[monitor_pb2.MonitorSnapshot, float]:
        """The monitor's snapshot for the call, and 0; while the monitor does not answer, its last one
        and how old it is (seconds)."""
        wf = call.workflow
        try:
            msg = await self.monitor_batches.snapshot(monitor_pb2.SnapshotRequest(
                program_id=wf.program_id, agent=wf.agent, workflow=wf.workflow, stage_index=wf.stage_index,
                stage_count=wf.stage_count, upstream_agent=wf.upstream_agent,
                prefix_blocks=call.prefix_blocks if self.pipeline.engine_picker.reads_prefix else (),
                in_flight_calls=self.pipeline.engine_picker.reads_in_flight_calls))
        except grpc.aio.AioRpcError as exc:
            if exc.code() not in MONITOR_AWAY:
                raise Unavailable(f"monitor failed the snapshot: {exc.code().name} {exc.details()}") from exc
            return self._stale_snapshot(call, f"{exc.code().name} {exc.details()}")
        if not self._monitor_answer(msg):
            return self._stale_snapshot(call, "restarted, rebuilding from engine reports")
        return self._decision_view(msg, call.request_id), 0.0

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

    def _stale_snapshot(self, call: LlmCall, why: str) -> tuple[monitor_pb2.MonitorSnapshot, float]:
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
        return self._decision_view(stale, call.request_id), max(age_s, 1e-6)

    async def _admit(self, call: LlmCall, admit: monitor_pb2.AdmitRequest) -> None:
        """Chimera Algorithm 1, line 32: I[m*][r.id] = r.predicted_tokens (and A[p] = m*, line 23), with
        HexGen-Flow's cost and Kairos's memory plan (``convert.admit_request``). Runs beside the engine
        request (``stream`` waits for it before the first chunk; the pending overlay counts the call here
        meanwhile). While the monitor does not answer the call still runs, counted by this balancer, and
        is told to the monitor once it answers (``_retell``)."""
        self.registrations.add(call.request_id, admit)
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

    # -- dispatch --------------------------------------------------------------------------
    def engine_request(self, call: LlmCall, dispatch: Dispatch, direct: bool) -> engine_pb2.EngineGenerateRequest:
        """The engine request with its dispatch ticket. ``direct``: the caller streams it from the engine,
        which then ends the monitor's entry (and holds it, to tell a restarted monitor)."""
        request = convert.engine_request(call, dispatch.priority, dispatch.retain_kv_s or 0.0,
                                         dispatch.reserve_output_tokens)
        if direct:
            request.admit.CopyFrom(dispatch.admit)
        request.ticket.CopyFrom(self.tickets.issue(request, call.workflow.tenant, dispatch.engine.engine_id,
                                                   engine_releases=direct, now_unix_s=time.time()))
        return request

    @staticmethod
    def sent(dispatch: Dispatch) -> None:
        """The engine request is on its way: the decision's cost ends here (call received -> request sent)."""
        receipt = dispatch.receipt
        receipt.decision_ms = (time.perf_counter() - dispatch.started_perf_s) * 1e3
        DECISION_S.observe(receipt.decision_ms / 1e3)
        log.info("decision", model=receipt.model, engine=receipt.engine_id, priority=receipt.priority,
                 predicted_tokens=receipt.predicted_tokens, decision_ms=round(receipt.decision_ms, 3),
                 rules={s.stage: s.rule for s in receipt.stages}, stale_snapshot_s=receipt.stale_snapshot_s,
                 redispatched_from=list(receipt.redispatched_from))
        if debug_enabled():  # the whole receipt, per-engine scores and loads included: ~0.5 ms a decision
            log.debug("decision_receipt", receipt=MessageToDict(receipt, preserving_proto_field_name=True))

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
        if admitted is not None:  # ended, however (failed or cancelled too: release anyway)
            await asyncio.wait({admitted})
        await release(self.monitor, request_id, output_tokens, outcome, started_unix_s, self.cfg.dependency_timeout_s)

    def channel(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = open_channel(address, self.cfg.serve.security)
        return channel


async def _ready(snapshot: tuple[monitor_pb2.MonitorSnapshot, float]) -> tuple[monitor_pb2.MonitorSnapshot, float]:
    return snapshot


async def _none() -> tuple[dict[str, float], bool]:
    return {}, False


async def _no_predictions() -> dict[str, tuple[Prediction, str]]:
    return {}
