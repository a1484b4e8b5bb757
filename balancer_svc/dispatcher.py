"""The balancer's request path, one way: (snapshot | router | predictor) -> model -> engine -> priority ->
(engine request | admit) -> stream -> release.

The three fetches run together and the admit runs beside the engine request, so a decision costs
one round trip to the slowest dependency plus the policies. Policies decide (the core's decision loop,
``hetflow.core.decision_loop``, holds included); this module only fetches what they read and carries
out what they chose, and the monitor's side of it (snapshots, admits, releases) is ``monitor_view``.
The router and predictor are advisory: if either is down the call still goes through on the
documented fallback (fastest model; input-length priority) and the receipt says so. The monitor is
not advisory: without it there is no load picture, so the call fails UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, replace
from typing import Iterator

import grpc
from google.protobuf.json_format import MessageToDict
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import Counter, Gauge, Histogram

from balancer_svc import convert
from balancer_svc.advisors import Advisors
from balancer_svc.config import BalancerConfig
from balancer_svc.live_alpha import AlphaReplay, LiveAlphaTuning
from balancer_svc.monitor_view import MonitorView, SeenSnapshot
from hetflow import wire
from hetflow.core.admission import TenantLimiter
from hetflow.core.call import LlmCall, stages_unknown, with_stages
from hetflow.core.decision_loop import DecisionLoop, Gathered, HoldLimits
from hetflow.core.errors import Aborted, AlreadyExists, DeadlineExceeded, ResourceExhausted, Unavailable
from hetflow.core.load_shedding import AcceptWaits, LoadShedder, LoopLag
from hetflow.core.monitor.memory_ledger import SLOT_S
from hetflow.core.pipeline import Decision, Pipeline
from hetflow.core.policies.contracts import Prediction, Priority, WaitForCapacity
from hetflow.core.snapshot import ClusterSnapshot, EngineView
from hetflow.core.workload_window import WorkloadWindow
from hetflow.runtime.channels import open_channel
from hetflow.runtime.logs import debug_enabled, get_logger
from hetflow.runtime.model_tokenizer import PromptCounter
from hetflow.runtime.tickets import TicketIssuer
from hetflow.v1 import (
    balancer_pb2,
    engine_pb2,
    monitor_pb2,
    monitor_pb2_grpc,
    predictor_pb2_grpc,
    router_pb2_grpc,
)

log = get_logger(__name__)
DECISIONS = Counter("hetflow_balancer_decisions_total", "Decisions per stage and rule", ["stage", "rule"])
HELD = Counter("hetflow_balancer_held_total", "Decisions deferred because no engine had KV room (Kairos 6)")
HELD_CALLS = Gauge("hetflow_balancer_held_calls", "Calls waiting for KV room now (Kairos 6)")
LOOP_LAG_S = Gauge("hetflow_balancer_loop_lag_seconds",
                   "How late the balancer's event loop runs timers (median of the last 10 probes, 50 ms apart)")
BURST_ALLOWANCE = Gauge("hetflow_balancer_burst_allowance_calls",
                        "Decide-only calls the balancer would still take while its event loop runs late")
DECISION_S = Histogram("hetflow_balancer_decision_seconds", "Call received -> engine request sent",
                       buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1))
HELD_S = Histogram("hetflow_balancer_held_seconds", "Call held for KV room (Kairos 6) -> room found or given up",
                   buckets=(0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300))
RELEASE_ROUND_S = Histogram("hetflow_balancer_release_round_seconds",
                            "A round deciding the held calls again (Kairos 6): its first decision's start -> "
                            "its last one's end", buckets=(0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
REDECIDED = Counter("hetflow_balancer_held_redecided_total", "Held calls decided again by a round (Kairos 6)")


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
    receipt: balancer_pb2.Receipt
    admit: monitor_pb2.AdmitRequest
    """The monitor's entry for the call, as sent by ``_admit``."""
    program_start_unix_s: float | None = None
    """When the monitor first saw the call's program; None when it had not."""
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


@dataclass(frozen=True)
class Advice:
    """What a call's later decisions reuse from its last fetch: the router's confidences and the predictor's
    predictions read the call alone (Chimera 3.3-3.4), so a held call's rounds ask the monitor again and
    not them. Valid while the call is the same (the monitor may infer other stages for it)."""

    call: LlmCall
    predictions: dict[str, tuple[Prediction, str]]
    """The predictor's own predictions (its fallbacks are asked again)."""
    confidences: tuple[dict[str, float], bool] | None
    """The router's answer, None when it was not asked."""

    @classmethod
    def of(cls, fetched: Fetched) -> Advice:
        return cls(fetched.call, {m: p for m, p in fetched.predictions.items() if not p[1]},
                   fetched.confidences if fetched.router_asked else None)


@dataclass(frozen=True)
class Placed:
    """A decision recorded (the pending entry added, the admit sent), not yet confirmed (``_confirmed``)."""

    fetched: Fetched
    """What it was decided on (with the router's late answer, if it was asked after the snapshot)."""
    decision: Decision
    engine: EngineView
    admit: monitor_pb2.AdmitRequest
    admitted: asyncio.Task[None]
    started_perf_s: float


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
        self.monitor_view = MonitorView(cfg, monitor_pb2_grpc.MonitorStub(self.channel(cfg.monitor_address)),
                                        self.pipeline.engine_picker.reads_prefix,
                                        self.pipeline.engine_picker.reads_in_flight_calls)
        """The monitor's snapshots, admits and releases, as this balancer sees them (``monitor_view``)."""
        self.tenants = TenantLimiter.from_mapping(cfg.tenant_limits)
        self.shedder = LoadShedder(cfg.max_calls, cfg.max_loop_lag_s, cfg.decide_burst_calls,
                                   cfg.decide_burst_refill_s)
        self.accept_waits = AcceptWaits(cfg.accept_wait_target_s, cfg.accept_wait_interval_s)
        """How long calls waited to be taken: a standing queue refuses new ones at once (CoDel's rule)."""
        self.loop_lag = LoopLag()
        """How late the event loop runs timers (``_measure_loop_lag``)."""
        self._lag_probe: asyncio.Task[None] | None = None
        self.count_prompt = PromptCounter(cfg.tokenizers) if cfg.tokenizers else None
        """A call's prompt tokens as its servers count them; None: the approximate count."""
        self.workload = WorkloadWindow(cfg.workload_window_s, cfg.workload_sample)
        """The live workload the re-planner reads (Cascadia 4.4)."""
        self.gateway_calls: set[str] = set()
        """Calls a gateway sends to the model server itself (the endpoint picker): admitted ``via_gateway``."""
        self.tickets = TicketIssuer(cfg.serve.security.ticket_key())
        """Signs each engine request's dispatch ticket (issue 34)."""
        self._held_calls: dict[str, tuple[LlmCall, asyncio.Future[Dispatch]]] = {}
        self._deciding: set[str] = set()
        """Request ids being decided (held for room included): a second call under one is refused."""
        self._advice: dict[str, Advice] = {}
        """Per call held for room, what its last fetch asked of the router and predictor (``Advice``)."""
        self._releaser: asyncio.Task[None] | None = None
        self._retry_after_s = 0.5
        self._served_models: list[str] = []
        """The healthy models of the last snapshot: what the router and predictor are asked about
        beside the next snapshot."""
        self.advisors = Advisors(
            router_pb2_grpc.RouterStub(self.channel(cfg.router_address)) if cfg.router_address else None,
            predictor_pb2_grpc.PredictorStub(self.channel(cfg.predictor_address)) if cfg.predictor_address else None,
            cfg.quantiles, cfg.dependency_timeout_s)

    def start(self) -> None:
        """Start watching the monitor and the event loop's lag; on the server's event loop."""
        self.monitor_view.start()
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

    async def close(self) -> None:
        stopping = [task for task in (self._releaser, self._lag_probe) if task is not None]
        for task in stopping:
            task.cancel()
        await asyncio.gather(*stopping, return_exceptions=True)
        await self.monitor_view.close()
        await self.advisors.close()
        for channel in self._channels.values():
            await channel.close()
        if self.alpha_tuning is not None:
            self.alpha_tuning.close()

    # -- admission -----------------------------------------------------------------------
    @contextlib.contextmanager
    def admission(self, tenant: str, relays: bool = True, accept_wait_s: float | None = None) -> Iterator[None]:
        """The balancer's own limits (calls at once, event-loop lag, a standing queue of calls waiting to be
        taken, the burst allowance) and the tenant's, entered once per client call (a cascade's stages and
        judge calls run inside one): RESOURCE_EXHAUSTED past them. ``relays``: this balancer streams the
        call's tokens (False: it only decides it, ``hetflow.core.load_shedding``); ``accept_wait_s``: how
        long the call waited to be taken (None: not known)."""
        standing_s = self.accept_waits.add(time.monotonic(), accept_wait_s)
        spent_burst = self.shedder.enter(self.loop_lag.lag_s, relays, standing_s)
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

    # -- decide --------------------------------------------------------------------------
    async def decide(self, call: LlmCall) -> Dispatch:
        """Decide; a call no engine of its model has room for is held (Kairos 6) until a round finds it
        room, the client gives up (its gRPC deadline cancels this) or the program's deadline passes. A
        request id this balancer is deciding or running already is refused (ALREADY_EXISTS): the second
        call would take over the first's entry and its end would end the first's."""
        if call.request_id in self._deciding or self.monitor_view.running_here(call.request_id):
            raise AlreadyExists(f"request {call.request_id!r} is in flight already")
        self._deciding.add(call.request_id)
        try:
            return await self._decide_once(call)
        except WaitForCapacity as wait:
            return await self._hold(call, wait)
        finally:
            self._advice.pop(call.request_id, None)
            self._deciding.discard(call.request_id)

    async def _hold(self, call: LlmCall, wait: WaitForCapacity) -> Dispatch:
        """Wait in the hold queue; each round (``_release_rounds``) decides the held calls again in
        priority order and resolves this call's future once it gets room or fails for good."""
        give_up_s, held_since_s = self.decisions.hold(call, wait, time.time()), time.monotonic()
        deadline = call.workflow.deadline_unix_s
        outcome: asyncio.Future[Dispatch] = asyncio.get_running_loop().create_future()
        self._held_calls[call.request_id] = (call, outcome)
        self._retry_after_s = wait.retry_after_s
        HELD.inc()
        HELD_CALLS.set(len(self.decisions.held))
        log.info("held_for_capacity", reason=str(wait), held=len(self.decisions.held))
        if self._releaser is None or self._releaser.done():
            self._releaser = asyncio.get_running_loop().create_task(self._release_rounds())
        try:
            async with asyncio.timeout(give_up_s):  # not wait_for: on 3.11 it can swallow the caller's cancel
                return await outcome
        except TimeoutError as exc:
            if outcome.done() and not outcome.cancelled() and outcome.exception() is None:
                return outcome.result()  # placed by a round in the loop turn the hold ran out: it goes
            if deadline and time.time() >= deadline:
                raise DeadlineExceeded(f"program deadline passed while waiting for KV room: {wait}") from exc
            raise ResourceExhausted(f"no KV room within max_hold_s {self.cfg.max_hold_s:g}s: {wait}",
                                    retry_after_s=max(1.0, wait.retry_after_s)) from exc
        except asyncio.CancelledError:
            if outcome.done() and not outcome.cancelled() and outcome.exception() is None:
                dispatch = outcome.result()  # admitted as its caller gave up: release it
                self.monitor_view.release_later(call.request_id, 0, "cancelled", admitted=dispatch.admitted)
            raise
        finally:
            HELD_S.observe(time.monotonic() - held_since_s)
            self.decisions.leave(call.request_id)
            self._held_calls.pop(call.request_id, None)
            HELD_CALLS.set(len(self.decisions.held))

    async def _release_rounds(self) -> None:
        """A round a slot: every held call, in the hold queue's order, is decided again; each that fits
        goes, the others stay for the next round (Kairos 6). Ends when nothing is held."""
        while self.decisions.held:
            await asyncio.sleep(self._retry_after_s)
            with RELEASE_ROUND_S.time():
                await self._release_round()

    async def _release_round(self) -> None:
        """One round: the held calls' snapshots fetched together (one batch to the monitor, their advice
        kept from their last decision), then each decided in the hold queue's order, each seeing the
        admits of those before it, and their conditional admits awaited together: a round costs one round
        trip to the monitor and one to its admits, not one per held call."""
        held = [(h.request_id, *self._held_calls[h.request_id]) for h in self.decisions.round()
                if h.request_id in self._held_calls and not self._held_calls[h.request_id][1].done()]
        REDECIDED.inc(len(held))
        start = time.perf_counter()
        fetched = await asyncio.gather(*(self._fetch(call, self._advice.get(request_id))
                                         for request_id, call, _ in held), return_exceptions=True)
        placed = await self._place_held([(r, outcome) for r, _, outcome in held], fetched, start)
        confirmed = await asyncio.gather(*(self._confirmed(p) for _, _, p in placed), return_exceptions=True)
        self._settle_held(placed, confirmed)
        for request_id, _, _ in held:
            if request_id not in self._held_calls:  # its caller left during the round, which kept its advice
                self._advice.pop(request_id, None)

    async def _place_held(self, held: list[tuple[str, asyncio.Future[Dispatch]]],
                          fetched: list[Fetched | BaseException], start_perf_s: float
                          ) -> list[tuple[str, asyncio.Future[Dispatch], Placed]]:
        """A round's held calls placed one after another in the hold queue's order; those still without
        room stay held, a call whose fetch or decision failed gets the error."""
        placed: list[tuple[str, asyncio.Future[Dispatch], Placed]] = []
        for (request_id, outcome), got in zip(held, fetched):
            if outcome.done():
                continue  # its caller gave up
            if isinstance(got, BaseException):
                if isinstance(got, Exception):
                    outcome.set_exception(got)  # the held caller gets the fetch's error
                continue
            try:
                placed.append((request_id, outcome, await self._place(got, start_perf_s)))
            except WaitForCapacity:
                continue
            except Exception as exc:  # noqa: BLE001 - the held caller gets the error, the round goes on
                if not outcome.done():  # its caller may have given up while the router was asked
                    outcome.set_exception(exc)
        return placed

    def _settle_held(self, placed: list[tuple[str, asyncio.Future[Dispatch], Placed]],
                     confirmed: list[Dispatch | BaseException]) -> None:
        """Each placed call's caller gets its dispatch, or its error; a refused admit stays held."""
        for (request_id, outcome, decided), dispatch in zip(placed, confirmed):
            if isinstance(dispatch, WaitForCapacity):
                continue
            if isinstance(dispatch, BaseException):
                if not outcome.done() and isinstance(dispatch, Exception):
                    outcome.set_exception(dispatch)
                continue
            self.decisions.leave(request_id)
            if outcome.done():  # the caller gave up while this round admitted it: nothing may linger
                self.monitor_view.release_later(request_id, 0, "cancelled", admitted=decided.admitted)
            else:
                outcome.set_result(dispatch)

    async def _decide_once(self, call: LlmCall) -> Dispatch:
        """Chimera Algorithm 1: fetch (``_fetch``: the snapshot, the router and the predictor together),
        place (``_place``: decide and record), confirm (``_confirmed``: the conditional admit's answer and
        the receipt)."""
        start = time.perf_counter()
        fetched = await self._fetch(call, self._advice.get(call.request_id))
        return await self._confirmed(await self._place(fetched, start))

    async def _place(self, fetched: Fetched, start_perf_s: float) -> Placed:
        """Decide on what was fetched (hetflow.core.decision_loop) and record the decision without yielding,
        so concurrent calls see each other; raises ``WaitForCapacity`` when no engine has room."""
        call, snapshot = fetched.call, fetched.snapshot
        view = self.monitor_view.pending.apply(snapshot, fetched.admit_seq, time.monotonic())
        if not fetched.router_asked and self.pipeline.needs_router(call, fetched.candidates, view):
            # this balancer's admits since the snapshot brought a second model within the slack: the
            # router's confidences can now change the model, so it is asked, and the view taken again
            fetched = replace(fetched, router_asked=True, confidences=await self.advisors.score(call))
        confidence, truncated = fetched.confidences

        # From here to the pending entry: no await, so no other decision interleaves.
        view = self.monitor_view.pending.apply(snapshot, fetched.admit_seq, time.monotonic())
        try:
            decision = self.decisions.decide(Gathered(call, view, fetched.candidates, fetched.router_asked,
                                                      confidence, fetched.predictions, truncated))
        except WaitForCapacity:
            self._held_advice(fetched)
            raise
        engine = next(e for e in view.engines if e.engine_id == decision.engine_id)
        self.monitor_view.pending.add(call.request_id, engine.engine_id, decision.prediction.median_tokens,
                         decision.predicted_cost_s, decision.memory_plan, call.input_tokens, time.time())

        admit = convert.admit_request(call, decision)
        admit.via_gateway = call.request_id in self.gateway_calls
        admitted = self.monitor_view.admit_later(call, admit)
        return Placed(fetched, decision, engine, admit, admitted, start_perf_s)

    def _held_advice(self, fetched: Fetched) -> None:
        """The call is held for room: its rounds reuse what it asked of the router and predictor."""
        self._advice[fetched.call.request_id] = Advice.of(fetched)

    async def _confirmed(self, placed: Placed) -> Dispatch:
        """The placed call's dispatch and receipt, once a conditional admit (the room its decision assumed)
        is confirmed: raises ``WaitForCapacity`` when the monitor refused it."""
        call, snapshot, decision, engine = placed.fetched.call, placed.fetched.snapshot, placed.decision, placed.engine
        if placed.admit.within_kv or placed.admit.HasField("within_working_set"):  # admitted before it is
            # sent: the room its decision assumed may have gone to another balancer's call
            try:
                await self._admitted_with_room(call.request_id, placed.admitted, decision.priority)
            except WaitForCapacity:
                self._held_advice(placed.fetched)
                raise
        receipt = balancer_pb2.Receipt(
            request_id=call.request_id, program_id=call.workflow.program_id, model=decision.model,
            engine_id=engine.engine_id, priority=decision.priority.key, priority_tiebreak=decision.priority.tiebreak,
            predicted_tokens=decision.prediction.median_tokens, workflow=wire.workflow_to_proto(call.workflow),
            snapshot_unix_s=snapshot.taken_unix_s, stale_snapshot_s=placed.fetched.stale_s,
            stages=[convert.stage_to_proto(s.stage, s.plugin, s.choice, s.elapsed_ms) for s in decision.stages])
        if snapshot.inferred_stages is not None:
            receipt.inferred_stages.CopyFrom(wire.stage_inference_to_proto(snapshot.inferred_stages))
        for s in decision.stages:
            DECISIONS.labels(s.stage, s.choice.rule).inc()
        return Dispatch(decision.model, engine, decision.priority, receipt, placed.admit,
                        snapshot.program_start_s, placed.started_perf_s, placed.admitted, decision.retain_kv_s,
                        decision.reserve_output_tokens)

    async def _admitted_with_room(self, request_id: str, admitted: asyncio.Task[None], priority: Priority) -> None:
        """Wait for a conditional admit (``hetflow.core.room``: the memory packer's calls, new programs
        past the working-set gate): refused because the engine's room went to calls admitted since the
        snapshot, by this balancer or another,
        the call is held and decided again on the next round (Kairos 6), never sent to an engine that
        cannot hold it."""
        try:
            await asyncio.shield(admitted)
        except Aborted as exc:
            raise WaitForCapacity(str(exc), SLOT_S, priority) from exc
        except asyncio.CancelledError:  # its caller gave up: nothing may linger in the monitor
            self.monitor_view.release_later(request_id, 0, "cancelled", admitted=admitted)
            raise

    async def _fetch(self, call: LlmCall, known: Advice | None = None) -> Fetched:
        """The call, the snapshot, the router's confidences and the predictions, in one round trip's time:
        the router and predictor are asked beside the snapshot for the models the last snapshot served
        (and the router only for a program this balancer has not seen assigned, and only when the engines
        as the watch tells them let its confidences change the model: ``ModelPicker.reads_confidence``,
        so the router's encoder runs for no call whose model they cannot change), then whatever the
        snapshot shows they missed is asked after it. The first call, with no snapshot seen yet, fetches
        in two steps; so does a call of a program that names no stage position or count, which the
        snapshot infers (Kairos 4.2) before the predictor reads them. ``known``: the call's advice from its
        last fetch, reused rather than asked again. The call returned is the one decided: with the inferred
        stages, if any."""
        first = None
        if stages_unknown(call):
            first = await self.monitor_view.snapshot(call)
            inferred = first[0].inferred_stages
            if inferred is not None and inferred.stage_index:
                call = with_stages(call, inferred.stage_index, inferred.stage_count)
        reuse = known if known is not None and known.call == call else None
        predicted = reuse.predictions if reuse is not None else {}
        scored_before = reuse.confidences if reuse is not None else None
        models = [call.model_pin] if call.model_pin else self._served_models
        guess = [m for m in models if m not in predicted]
        ask_router = scored_before is None and bool(models) and \
            not self.monitor_view.knows_program(call.workflow.program_id) and \
            self.pipeline.needs_router(call, models, self.monitor_view.watched_engines())
        (snapshot, admit_seq, stale_s), scored, predictions = await asyncio.gather(
            self.monitor_view.snapshot(call) if first is None else _ready(first),
            self.advisors.score(call) if ask_router else _none(),
            self.advisors.predict(call, guess) if guess else _no_predictions())
        self._served_models = snapshot.healthy_models()
        scored = scored_before if scored_before is not None else scored
        predictions = {**predicted, **predictions}
        candidates, router_asked = self.decisions.candidates(call, snapshot)
        missing = [m for m in candidates if m not in predictions]
        late_router = router_asked and not ask_router and scored_before is None
        if late_router or missing:
            late_scored, late = await asyncio.gather(self.advisors.score(call) if late_router else _none(),
                                                     self.advisors.predict(call, missing) if missing
                                                     else _no_predictions())
            scored = late_scored if late_router else scored
            predictions = {**predictions, **late}
        if snapshot.program_model:
            self.monitor_view.remember_program(call.workflow.program_id, snapshot.program_model)
        return Fetched(call, snapshot, admit_seq, stale_s, candidates, router_asked,
                       scored if router_asked else ({}, False), predictions)

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
        if debug_enabled():  # nothing rendered per decision at info: the receipt and the metrics carry it
            log.debug("decision", model=receipt.model, engine=receipt.engine_id, priority=receipt.priority,
                      predicted_tokens=receipt.predicted_tokens, decision_ms=round(receipt.decision_ms, 3),
                      rules={s.stage: s.rule for s in receipt.stages}, stale_snapshot_s=receipt.stale_snapshot_s,
                      redispatched_from=list(receipt.redispatched_from))
            # the whole receipt, per-engine scores and loads included: ~0.5 ms a decision
            log.debug("decision_receipt", receipt=MessageToDict(receipt, preserving_proto_field_name=True))

    def channel(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = open_channel(address, self.cfg.serve.security)
        return channel


async def _ready(snapshot: SeenSnapshot) -> SeenSnapshot:
    return snapshot


async def _none() -> tuple[dict[str, float], bool]:
    return {}, False


async def _no_predictions() -> dict[str, tuple[Prediction, str]]:
    return {}
