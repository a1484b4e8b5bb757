"""The balancer's request path, one way: snapshot -> model -> priority -> engine -> admit -> stream -> release.

Policies decide; this module only fetches what they read and carries out what they chose. The router
and predictor are advisory: if either is down the call still goes through on the documented fallback
(fastest model; input-length priority) and the receipt says so. The monitor is not advisory: without
it there is no load picture, so the call fails UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import AsyncIterator

import grpc
from google.protobuf.json_format import MessageToDict
from prometheus_client import Counter, Histogram

from balancer_svc import convert, policies
from balancer_svc.call import LlmCall
from balancer_svc.config import BalancerConfig
from balancer_svc.pending import PendingAdmits
from balancer_svc.policies import Choice, Prediction
from balancer_svc.snapshot import ClusterSnapshot, EngineView
from hetflow.errors import DeadlineExceeded, NotFound, Unavailable
from hetflow.runtime.logs import get_logger
from hetflow.v1 import (balancer_pb2, common_pb2, engine_pb2_grpc, monitor_pb2, monitor_pb2_grpc, predictor_pb2,
                        predictor_pb2_grpc, router_pb2, router_pb2_grpc)

log = get_logger(__name__)
DECISIONS = Counter("hetflow_balancer_decisions_total", "Decisions per stage and rule", ["stage", "rule"])
DECISION_S = Histogram("hetflow_balancer_decision_seconds", "Call received -> engine request sent",
                       buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1))


@dataclass
class Decision:
    model: str
    engine: EngineView
    priority: float
    prediction: Prediction
    receipt: balancer_pb2.Receipt


class Dispatcher:
    def __init__(self, cfg: BalancerConfig) -> None:
        self.cfg = cfg
        p = cfg.policy
        self.model_picker = policies.build("model", p.model, p.model_params)
        self.priority_rule = policies.build("priority", p.priority, p.priority_params)
        self.engine_picker = policies.build("engine", p.engine, p.engine_params)
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._releases: set[asyncio.Task[None]] = set()
        self.pending = PendingAdmits(horizon_s=4 * cfg.dependency_timeout_s)
        self.monitor = monitor_pb2_grpc.MonitorStub(self._channel(cfg.monitor_address))
        self.router = router_pb2_grpc.RouterStub(self._channel(cfg.router_address)) if cfg.router_address else None
        self.predictor = (predictor_pb2_grpc.PredictorStub(self._channel(cfg.predictor_address))
                          if cfg.predictor_address else None)

    async def close(self) -> None:
        if self._releases:
            await asyncio.wait(self._releases, timeout=5.0)
        for channel in self._channels.values():
            await channel.close()

    # -- decide --------------------------------------------------------------------------
    async def decide(self, call: LlmCall) -> Decision:
        """Chimera Algorithm 1. Fetches first (snapshot, then router and predictor together), then
        decides and records the decision without yielding, so concurrent calls see each other."""
        start = time.perf_counter()
        receipt = balancer_pb2.Receipt(request_id=call.request_id, program_id=call.workflow.program_id)
        snapshot_msg = await self._snapshot(call)
        snapshot = convert.snapshot_from_proto(snapshot_msg)
        receipt.snapshot_unix_s = snapshot.taken_unix_s
        candidates = self._candidate_models(call, snapshot)
        needs_router = not call.model_pin and len(candidates) > 1 and self.model_picker.needs_router
        (confidence, truncated), predictions = await asyncio.gather(
            self._score(call) if needs_router else _none(), self._predict(call, candidates))

        # From here to the pending entry: no await, so no other decision interleaves.
        view = self.pending.apply(snapshot, snapshot_msg.admit_seq, time.monotonic())
        t = time.perf_counter()
        model_choice, plugin = self._choose_model(call, view, candidates, confidence, needs_router)
        if truncated:  # the encoder saw only the first max_length tokens of the prompt
            model_choice = Choice(model_choice.chosen, f"router-prompt-truncated;{model_choice.rule}",
                                  model_choice.scores, model_choice.loads, model_choice.params)
        self._record(receipt, "model", plugin, model_choice, t)
        model = model_choice.chosen

        t = time.perf_counter()
        prediction, predictor_note = predictions[model]
        priority, priority_choice = self.priority_rule.priority(call, prediction)
        if predictor_note:
            priority_choice = Choice(priority_choice.chosen, f"{predictor_note};{priority_choice.rule}",
                                     priority_choice.scores)
        self._record(receipt, "priority", self.priority_rule.type_name, priority_choice, t)

        t = time.perf_counter()
        engine_choice = self.engine_picker.pick(call, view, model)
        self._record(receipt, "engine", self.engine_picker.type_name, engine_choice, t)
        engine = next(e for e in view.engines if e.engine_id == engine_choice.chosen)
        self.pending.add(call.request_id, engine.engine_id, prediction.median_tokens)

        await self._admit(call, model, engine.engine_id, prediction.median_tokens)
        receipt.model, receipt.engine_id = model, engine.engine_id
        receipt.priority, receipt.predicted_tokens = priority, prediction.median_tokens
        receipt.decision_ms = (time.perf_counter() - start) * 1e3
        DECISION_S.observe(receipt.decision_ms / 1e3)
        log.info("decision", receipt=MessageToDict(receipt, preserving_proto_field_name=True))
        return Decision(model, engine, priority, prediction, receipt)

    async def _snapshot(self, call: LlmCall) -> monitor_pb2.MonitorSnapshot:
        try:
            return await self.monitor.Snapshot(monitor_pb2.SnapshotRequest(program_id=call.workflow.program_id),
                                               timeout=self.cfg.dependency_timeout_s)
        except grpc.aio.AioRpcError as exc:
            raise Unavailable(f"monitor unavailable: {exc.code().name} {exc.details()}") from exc

    @staticmethod
    def _candidate_models(call: LlmCall, snapshot: ClusterSnapshot) -> list[str]:
        """The models this call may go to: its pin, its program's model (affinity), or every healthy one."""
        if call.model_pin:
            if call.model_pin not in snapshot.models():
                raise NotFound(f"model_pin {call.model_pin!r} is not served; models: {snapshot.models()}")
            if not snapshot.healthy_engines(call.model_pin):
                raise Unavailable(f"no healthy engine for model {call.model_pin!r}")
            return [call.model_pin]
        healthy = snapshot.healthy_models()
        if not healthy:
            raise Unavailable("no healthy engine serves any model")
        return [snapshot.program_model] if snapshot.program_model in healthy else healthy

    def _choose_model(self, call: LlmCall, view: ClusterSnapshot, candidates: list[str],
                      confidence: dict[str, float], needs_router: bool) -> tuple[Choice, str]:
        if call.model_pin:
            return Choice(call.model_pin, "model-pin"), "model-pin"
        choice = self.model_picker.pick(call, view, confidence)
        if needs_router and not confidence:
            choice = Choice(choice.chosen, f"router-unavailable;{choice.rule}", choice.scores, choice.loads, choice.params)
        return choice, self.model_picker.type_name

    async def _score(self, call: LlmCall) -> tuple[dict[str, float], bool]:
        """Router confidences q[m] (Chimera Algorithm 1, lines 4-5) and whether the prompt was cut."""
        if self.router is None:
            return {}, False
        try:
            reply = await self.router.Score(router_pb2.ScoreRequest(prompts=[call.user_prompt]),
                                            timeout=self.cfg.dependency_timeout_s)
            return dict(reply.scores[0].confidence), reply.scores[0].truncated
        except grpc.aio.AioRpcError as exc:
            log.warning("router_unavailable", code=exc.code().name, details=exc.details())
            return {}, False

    async def _predict(self, call: LlmCall, models: list[str]) -> dict[str, tuple[Prediction, str]]:
        """y-hat = Y-hat(r.meta_info, m) for every candidate m in one batch; Algorithm 1 line 28 then
        takes the chosen model's. Falls back to the input-length proxy when the predictor is down."""
        if self.predictor is not None:
            try:
                reply = await self.predictor.Predict(
                    predictor_pb2.PredictRequest(rows=[convert.feature_row(call, m) for m in models],
                                                 quantiles=self.cfg.quantiles),
                    timeout=self.cfg.dependency_timeout_s)
                return {m: (convert.prediction_from_proto(p, self.cfg.quantiles), "")
                        for m, p in zip(models, reply.predictions)}
            except grpc.aio.AioRpcError as exc:
                log.warning("predictor_unavailable", code=exc.code().name, details=exc.details())
        return {m: (Prediction(float(call.input_tokens)), "predictor-unavailable:input-length") for m in models}

    async def _admit(self, call: LlmCall, model: str, engine_id: str, predicted_tokens: float) -> None:
        """Chimera Algorithm 1, line 32: I[m*][r.id] = r.predicted_tokens (and A[p] = m*, line 23)."""
        try:
            reply = await self.monitor.Admit(monitor_pb2.AdmitRequest(
                request_id=call.request_id, program_id=call.workflow.program_id, model=model, engine_id=engine_id,
                predicted_tokens=predicted_tokens, workflow=convert.workflow_to_proto(call.workflow),
                prompt_tokens=call.input_tokens), timeout=self.cfg.dependency_timeout_s)
            self.pending.acked(call.request_id, reply.admit_seq, time.monotonic())
        except asyncio.CancelledError:
            self._release_later(call.request_id, 0, "cancelled")  # the admit may have landed
            raise
        except grpc.aio.AioRpcError as exc:
            self.pending.drop(call.request_id)
            if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
                raise
            raise Unavailable(f"monitor admit failed: {exc.code().name} {exc.details()}") from exc

    @staticmethod
    def _record(receipt: balancer_pb2.Receipt, stage: str, plugin: str, choice: Choice, started: float) -> None:
        receipt.stages.append(convert.stage_to_proto(stage, plugin, choice, (time.perf_counter() - started) * 1e3))
        DECISIONS.labels(stage, choice.rule).inc()

    # -- dispatch and stream -------------------------------------------------------------
    async def stream(self, call: LlmCall, decision: Decision,
                     time_remaining_s: float | None) -> AsyncIterator[balancer_pb2.GenerateChunk]:
        """Forward the engine's deltas; always release the monitor entry, whatever happens."""
        engine = engine_pb2_grpc.EngineStub(self._channel(decision.engine.address))
        engine_call = engine.Generate(convert.engine_request(call, decision.priority), timeout=time_remaining_s)
        output_tokens, outcome, queued_s = 0, "cancelled", 0.0
        first = True
        try:
            async for chunk in engine_call:
                out = balancer_pb2.GenerateChunk(request_id=call.request_id, text=chunk.text,
                                                 output_tokens=chunk.output_tokens, finished=chunk.finished,
                                                 finish_reason=chunk.finish_reason)
                if first and call.want_receipt:
                    out.receipt.CopyFrom(decision.receipt)
                first = False
                output_tokens = chunk.output_tokens
                queued_s += chunk.queued_s
                if chunk.finished:
                    out.usage.CopyFrom(common_pb2.Usage(prompt_tokens=chunk.prompt_tokens, output_tokens=output_tokens))
                    outcome = "completed" if chunk.finish_reason != "abort" else "aborted"
                    out.queued_s = queued_s
                yield out
        except grpc.aio.AioRpcError as exc:
            outcome = _engine_failure(exc)
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise DeadlineExceeded(f"deadline exceeded after {output_tokens} tokens; engine request aborted") from exc
            if exc.code() == grpc.StatusCode.UNAVAILABLE:
                raise Unavailable(f"engine {decision.engine.engine_id} unavailable: {exc.details()}") from exc
            raise
        finally:
            engine_call.cancel()  # no-op when finished; otherwise the engine aborts the request
            self._release_later(call.request_id, output_tokens, outcome)

    def _release_later(self, request_id: str, output_tokens: int, outcome: str) -> None:
        """Remove the in-flight entry off the caller's task, so a cancelled caller cannot skip it."""
        self.pending.drop(request_id)
        task = asyncio.get_running_loop().create_task(self._release(request_id, output_tokens, outcome))
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)

    async def _release(self, request_id: str, output_tokens: int, outcome: str) -> None:
        msg = monitor_pb2.ReleaseRequest(request_id=request_id, output_tokens=output_tokens, reason=outcome)
        method = self.monitor.Complete if outcome == "completed" else self.monitor.Cancel
        for attempt in range(3):
            try:
                await method(msg, timeout=self.cfg.dependency_timeout_s)
                return
            except grpc.aio.AioRpcError as exc:
                log.warning("release_failed", request_id=request_id, attempt=attempt, code=exc.code().name)
                await asyncio.sleep(0.2 * (attempt + 1))
        # The monitor's orphan reconciliation removes the entry once the engine stops reporting it.

    def _channel(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = grpc.aio.insecure_channel(address)
        return channel


async def _none() -> tuple[dict[str, float], bool]:
    return {}, False


def _engine_failure(exc: grpc.aio.AioRpcError) -> str:
    return {grpc.StatusCode.DEADLINE_EXCEEDED: "deadline", grpc.StatusCode.CANCELLED: "cancelled",
            grpc.StatusCode.UNAVAILABLE: "engine-failure"}.get(exc.code(), f"engine-error:{exc.code().name}")
