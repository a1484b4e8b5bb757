"""The Engine gRPC servicer: thin; conversions in convert.py, errors mapped by the interceptor."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import AsyncGenerator, AsyncIterator, TypeVar, cast

import grpc
from prometheus_client import Gauge

from engine_svc import convert
from engine_svc.backends.base import EngineBackend, HoldingBackend, ModelServerGrant, OutputDelta, merge
from engine_svc.monitor_link import MonitorLink
from hetflow.core.errors import FailedPrecondition, InvalidArgument, ResourceExhausted, Unimplemented
from hetflow.runtime.interceptors import status_of
from hetflow.runtime.logs import bind_ids, get_logger
from hetflow.runtime.releases import released_before_end
from hetflow.runtime.security import CURRENT_CALLER, peer_identity
from hetflow.runtime.tickets import TicketChecker
from hetflow.v1 import common_pb2, engine_pb2, engine_pb2_grpc

log = get_logger(__name__)
T = TypeVar("T")
WAITING = Gauge("hetflow_engine_waiting", "Requests waiting (hetflow's queue and the engine's own)")
RUNNING = Gauge("hetflow_engine_running", "Requests running")
KV_USAGE = Gauge("hetflow_engine_kv_cache_usage", "Share of KV blocks in use")
PREEMPTIONS = Gauge("hetflow_engine_preemptions", "Preemptions since start")


class EngineServicer(engine_pb2_grpc.EngineServicer):
    def __init__(self, engine_id: str, address: str, backend: EngineBackend, max_tokens_limit: int,
                 tickets: TicketChecker, monitor: MonitorLink | None = None, stream_interval_tokens: int = 1,
                 max_waiting: int = 4096, serving_endpoint: str = "") -> None:
        self.engine_id, self.address, self.serving_endpoint = engine_id, address, serving_endpoint
        self.tickets = tickets
        """Checks each call's dispatch ticket (issue 34)."""
        self.monitor = monitor
        """Ends the monitor's entries of direct-path calls; None without a monitor."""
        self._releases: set[asyncio.Task[None]] = set()
        self.backend = backend
        self.max_tokens_limit = max_tokens_limit
        self.stream_interval_tokens = max(1, stream_interval_tokens)
        self.max_waiting = max_waiting
        self.waiting = 0
        """Calls here that have not streamed their first token."""
        self.serving = True
        self.incarnation = uuid.uuid4().hex[:12]
        """This process's: with the backend's server starts, what the monitor tells restarts by."""

    async def Generate(self, request: engine_pb2.EngineGenerateRequest,
                       context: grpc.aio.ServicerContext) -> AsyncIterator[engine_pb2.EngineChunk]:
        direct = self._admit(request, context)
        received_unix_s, started_unix_s = time.time(), 0.0
        output_tokens, outcome = 0, "cancelled"
        chunks = self._stream(request)
        try:
            async for chunk in chunks:
                if not started_unix_s:
                    started_unix_s = received_unix_s + chunk.queued_s
                output_tokens = chunk.output_tokens
                if chunk.finished:
                    outcome = "completed" if chunk.finish_reason != "abort" else "aborted"
                    if direct:  # the monitor hears of the end before the caller does
                        direct = False
                        await released_before_end(self._end_direct_later(request.request_id, output_tokens,
                                                                         outcome, started_unix_s))
                yield chunk
        except Exception as exc:
            outcome = f"engine-error:{status_of(exc)[0].name}"
            if direct and not started_unix_s:
                direct = False
                await self._end_direct_first(request.request_id, outcome)
            raise
        finally:
            try:
                await chunks.aclose()  # aborts the request if the caller went away early
            finally:  # even where the abort fails (an engine core that died): the monitor hears of the end
                if direct:
                    self._end_direct_later(request.request_id, output_tokens, outcome, started_unix_s)

    async def Hold(self, requests: AsyncIterator[engine_pb2.HoldMessage],
                   context: grpc.aio.ServicerContext) -> AsyncIterator[engine_pb2.HoldGrant]:
        """A call whose caller streams it from the model server itself (issue 34): it waits in hetflow's
        queue as any call does, its turn is answered with the request to send, and its slot is held until
        the caller's second message says how the stream ended (or the caller goes away: the call is then
        cancelled and its slot freed)."""
        backend = self.backend
        if not isinstance(backend, HoldingBackend):  # before the ticket is used: the caller may still Generate
            raise Unimplemented(f"engine {self.engine_id} ({backend.backend_name}) has no model server a "
                                "caller may stream from: call Generate")
        messages = aiter(requests)
        first = await anext(messages, None)
        if first is None or first.WhichOneof("kind") != "request":
            raise InvalidArgument("a Hold's first message is the request")
        request = first.request
        direct = self._admit(request, context)
        end, outcome, granted = engine_pb2.HoldEnd(), "cancelled", False
        items: AsyncGenerator[ModelServerGrant | OutputDelta, None] | None = None
        try:
            items = self._counted(backend.hold(convert.call_from_proto(request, self.max_tokens_limit)))
            grant = await anext(items)
            assert isinstance(grant, ModelServerGrant)
            granted = True
            yield convert.grant_to_proto(grant)
            last = await anext(messages, None)
            if last is None:
                return  # the caller went away: closing ``items`` cancels the call
            if last.WhichOneof("kind") != "end":
                raise InvalidArgument("a Hold's second message is the end")
            end = last.end
            backend.release(request.request_id, end.output_tokens, end.finish_reason)
            async for _ in items:  # the call's last delta: its slot is free
                pass
            outcome = (f"engine-error:{end.error}" if end.error else
                       "aborted" if end.finish_reason in ("abort", "") else "completed")
            if direct:  # before the hold closes: its caller shows the end once the hold has
                direct = False
                if end.error and not end.started_unix_s:  # failed before its first token: decided again
                    await self._end_direct_first(request.request_id, outcome)
                else:
                    await released_before_end(self._end_direct_later(request.request_id, end.output_tokens, outcome,
                                                                     end.started_unix_s))
        except Exception as exc:
            outcome = f"engine-error:{status_of(exc)[0].name}"
            if direct and not granted:
                direct = False
                await self._end_direct_first(request.request_id, outcome)
            raise
        finally:
            try:
                if items is not None:
                    await items.aclose()
            finally:
                if direct:
                    self._end_direct_later(request.request_id, end.output_tokens, outcome, end.started_unix_s)

    def _admit(self, request: engine_pb2.EngineGenerateRequest, context: grpc.aio.ServicerContext) -> bool:
        """Check the call's dispatch ticket; True when this engine, not the balancer, ends the monitor's
        entry (the direct path), which then counts the call as started here."""
        caller = CURRENT_CALLER.get()
        claims = self.tickets.check(request, caller.name if caller.kind == "tenant" else None,
                                    peer_identity(context), time.time())
        bind_ids(request.request_id, request.program_id)
        direct = claims.engine_releases and self.monitor is not None
        if direct:
            assert self.monitor is not None
            self.monitor.started(request.request_id, request.admit)
        return bool(direct)

    def _end_direct_later(self, request_id: str, output_tokens: int, outcome: str,
                          started_unix_s: float) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(
            self._end_direct(request_id, output_tokens, outcome, started_unix_s))
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)
        return task

    async def _end_direct_first(self, request_id: str, outcome: str) -> None:
        """End the entry of a call that failed before its first token, before its caller hears of it: the
        caller may decide it again at once under the same id, which the monitor refuses while the entry
        stands. The release goes on if the caller leaves meanwhile (it is never sent twice)."""
        await asyncio.shield(self._end_direct_later(request_id, 0, outcome, 0.0))

    async def releases_sent(self) -> None:
        """Every direct-path end scheduled so far has reached the monitor (or failed to)."""
        await asyncio.gather(*self._releases, return_exceptions=True)

    async def _end_direct(self, request_id: str, output_tokens: int, outcome: str, started_unix_s: float) -> None:
        assert self.monitor is not None
        await self.monitor.ended(request_id, output_tokens, outcome, started_unix_s)

    async def _stream(self, request: engine_pb2.EngineGenerateRequest) -> AsyncGenerator[engine_pb2.EngineChunk, None]:
        """The backend's deltas, merged to a chunk every ``stream_interval_tokens``."""
        call = convert.call_from_proto(request, self.max_tokens_limit)
        held: OutputDelta | None = None
        sent_tokens = 0
        stream = self._counted(self.backend.generate(call))
        try:
            async for delta in stream:
                assert isinstance(delta, OutputDelta)
                held = merge(held, delta) if held is not None else delta
                if held.finished or sent_tokens == 0 or held.output_tokens - sent_tokens >= self.stream_interval_tokens:
                    sent_tokens = held.output_tokens
                    yield convert.chunk_to_proto(held)
                    held = None
        finally:
            await stream.aclose()

    async def _counted(self, items: AsyncIterator[T]) -> AsyncGenerator[T, None]:
        """The backend's stream, counted in ``waiting`` until its first item (refused past ``max_waiting``)."""
        stream = cast(AsyncGenerator[T, None], items)
        if self.waiting >= self.max_waiting:
            await stream.aclose()
            raise ResourceExhausted(f"engine {self.engine_id} has {self.waiting} calls waiting (max_waiting)",
                                    retry_after_s=1.0)
        self.waiting += 1
        started = False
        try:
            async for item in stream:
                if not started:
                    started, self.waiting = True, self.waiting - 1
                yield item
        finally:
            if not started:
                self.waiting -= 1
            await stream.aclose()

    async def Abort(self, request: engine_pb2.AbortRequest, context: grpc.aio.ServicerContext) -> engine_pb2.AbortReply:
        """Abort a call this engine streams. A held call is its caller's to cancel (by closing its hold):
        the engine cannot stop a stream it does not carry, and freeing its slot would over-fill the server."""
        bind_ids(request.request_id)
        if isinstance(self.backend, HoldingBackend) and self.backend.holds(request.request_id):
            raise FailedPrecondition(f"call {request.request_id!r} is held by its caller, who streams it from the "
                                     "model server: the caller cancels it by closing its hold")
        return engine_pb2.AbortReply(found=await self.backend.abort(request.request_id))

    async def Status(self, request: engine_pb2.EngineStatusRequest,
                     context: grpc.aio.ServicerContext) -> common_pb2.EngineStatus:
        return self.status_proto()

    def status_proto(self) -> common_pb2.EngineStatus:
        status = self.backend.status()
        WAITING.set(status.waiting)
        RUNNING.set(status.running)
        KV_USAGE.set(status.kv_cache_usage)
        PREEMPTIONS.set(status.preemptions_total)
        return convert.status_to_proto(self.engine_id, self.backend.model, self.address,
                                       self.backend.backend_name, self.serving and self.backend.alive, status,
                                       self.backend.profile, self.serving_endpoint,
                                       f"{self.incarnation}.{status.server_starts}")
