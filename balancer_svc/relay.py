"""The relay path (``Balancer.Generate``): the balancer decides a call, sends it to the engine with a
dispatch ticket, and relays the engine's tokens back, for plain gRPC clients and for cascades (whose
judge must read each answer). The direct path (``direct.py``) decides only; both share the
dispatcher's decision, admission and release.
"""

from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator, Callable, ContextManager

import grpc
from prometheus_client import Counter

from balancer_svc.dispatcher import Dispatch, Dispatcher, NeverReached
from hetflow.core.call import LlmCall
from hetflow.core.errors import DeadlineExceeded, Unavailable
from hetflow.core.workload_window import WorkloadWindow
from hetflow.runtime.interceptors import REDISPATCHABLE, retry_pushback_s
from hetflow.runtime.logs import get_logger
from hetflow.runtime.releases import released_before_end
from hetflow.v1 import balancer_pb2, common_pb2, engine_pb2_grpc

log = get_logger(__name__)
REDISPATCHED = Counter("hetflow_balancer_redispatched_total",
                       "Calls sent to another engine after theirs failed before the first token")


class Relay:
    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher

    @property
    def admission(self) -> Callable[..., ContextManager[None]]:
        return self.dispatcher.admission

    @property
    def workload(self) -> WorkloadWindow:
        return self.dispatcher.workload

    async def serve(self, call: LlmCall, time_remaining_s: float | None) -> AsyncIterator[balancer_pb2.GenerateChunk]:
        """Admit the call (the dispatcher's ``admission``), then decide and stream it (``serve_admitted``)."""
        with self.dispatcher.admission(call.workflow.tenant, accept_wait_s=call.accept_wait_s):
            sampled = self.dispatcher.workload.record(call.received_unix_s, call.full_input, call.input_tokens,
                                                      call.workflow.workflow)
            async for chunk in self.serve_admitted(call, time_remaining_s):
                sampled.output_tokens = chunk.output_tokens
                yield chunk

    async def serve_admitted(self, call: LlmCall, time_remaining_s: float | None
                             ) -> AsyncIterator[balancer_pb2.GenerateChunk]:
        """Decide and stream. A call whose engine fails before its first token is decided again without
        that engine, up to ``redispatch_attempts`` times: a dead, stopped or unreachable engine is
        skipped by every call (and the monitor told); one that refused this call for room
        (RESOURCE_EXHAUSTED) only by this call. Once tokens have streamed, a failure ends the call
        UNAVAILABLE. With no engine left, the call ends with its last engine's error."""
        deadline_s = time.monotonic() + time_remaining_s if time_remaining_s is not None else None
        failures: list[NeverReached] = []
        try:
            while True:
                try:
                    dispatch = await self.dispatcher.decide(call)
                except Unavailable:
                    if failures:
                        raise failures[-1].as_error() from None
                    raise
                dispatch.receipt.redispatched_from.extend(f.engine_id for f in failures)
                remaining_s = deadline_s - time.monotonic() if deadline_s is not None else None
                try:
                    async for chunk in self.stream(call, dispatch, remaining_s):
                        yield chunk
                    return
                except NeverReached as exc:
                    await self._redispatching(call, exc, failures)
        finally:
            self.dispatcher.monitor_view.exclude(call.request_id, set())

    async def _redispatching(self, call: LlmCall, failure: NeverReached, failures: list[NeverReached]) -> None:
        """Exclude the failed engine (for everyone when it is the engine's fault), or give up."""
        d = self.dispatcher
        failures.append(failure)
        d.monitor_view.exclude(call.request_id, {f.engine_id for f in failures})
        if failure.engine_fault and not await d.answers_health(failure.address):
            await d.monitor_view.engine_unreachable(failure.engine_id, str(failure))
        if len(failures) > d.cfg.redispatch_attempts:
            raise failure.as_error()
        await d.monitor_view.released(call.request_id)  # the failed attempt's entry goes before the next admit
        REDISPATCHED.inc()
        log.warning("redispatching", failed_engine=failure.engine_id, reason=str(failure), attempt=len(failures))

    async def stream(self, call: LlmCall, dispatch: Dispatch,
                     time_remaining_s: float | None) -> AsyncIterator[balancer_pb2.GenerateChunk]:
        """Forward the engine's deltas; always release the monitor entry, whatever happens."""
        d = self.dispatcher
        engine = engine_pb2_grpc.EngineStub(d.channel(dispatch.engine.address))
        request = d.engine_request(call, dispatch, direct=False)
        engine_call = engine.Generate(request, timeout=time_remaining_s)
        d.sent(dispatch)
        output_tokens, outcome, queued_s = 0, "cancelled", 0.0
        sent_unix_s = time.time()
        started_unix_s = 0.0
        """When the engine first scheduled the call: sent plus its first wait, which the first chunk carries."""
        first, released = True, False
        try:
            if dispatch.admitted is not None:
                await asyncio.shield(dispatch.admitted)  # the monitor holds the call before any of it streams back
            async for chunk in engine_call:
                out = balancer_pb2.GenerateChunk(request_id=call.request_id, text=chunk.text,
                                                 output_tokens=chunk.output_tokens, finished=chunk.finished,
                                                 finish_reason=chunk.finish_reason)
                if first and call.want_receipt:
                    out.receipt.CopyFrom(dispatch.receipt)
                if first:
                    out.model, out.engine_id = dispatch.model, dispatch.engine.engine_id
                    started_unix_s = sent_unix_s + chunk.queued_s
                first = False
                output_tokens = chunk.output_tokens
                queued_s += chunk.queued_s
                if chunk.finished:
                    out.usage.CopyFrom(common_pb2.Usage(prompt_tokens=chunk.prompt_tokens, output_tokens=output_tokens))
                    outcome = "completed" if chunk.finish_reason != "abort" else "aborted"
                    out.queued_s = queued_s
                    if outcome == "completed" and d.alpha_tuning is not None:
                        d.alpha_tuning.call_finished(call, dispatch.engine, dispatch.program_start_unix_s,
                                                     chunk.prompt_tokens, output_tokens, sent_unix_s, time.time())
                    released = True  # the monitor hears of the end before the caller does
                    await released_before_end(d.monitor_view.release_later(call.request_id, output_tokens, outcome,
                                                              started_unix_s, dispatch.admitted))
                yield out
        except grpc.aio.AioRpcError as exc:
            outcome = _engine_failure(exc)
            if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise DeadlineExceeded(f"deadline exceeded after {output_tokens} tokens; engine request aborted"
                                       ) from exc
            if first and exc.code() in REDISPATCHABLE:
                raise NeverReached(dispatch.engine.engine_id, dispatch.engine.address, exc.code(), exc.details() or "",
                                   retry_pushback_s(exc)) from exc
            if exc.code() == grpc.StatusCode.UNAVAILABLE:
                raise Unavailable(f"engine {dispatch.engine.engine_id} failed after {output_tokens} tokens: "
                                  f"{exc.details()}") from exc
            raise
        finally:
            engine_call.cancel()  # no-op when finished; otherwise the engine aborts the request
            if not released:
                d.monitor_view.release_later(call.request_id, output_tokens, outcome, started_unix_s, dispatch.admitted)


def _engine_failure(exc: grpc.aio.AioRpcError) -> str:
    return {grpc.StatusCode.DEADLINE_EXCEEDED: "deadline", grpc.StatusCode.CANCELLED: "cancelled",
            grpc.StatusCode.UNAVAILABLE: "engine-failure"}.get(exc.code(), f"engine-error:{exc.code().name}")
