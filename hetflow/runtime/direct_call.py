"""One LLM call on the direct path (issue 34): decided by a balancer, streamed from the engine it names.

``Balancer.Decide`` answers with the engine's address and the engine request, which carries the
dispatch ticket that lets that engine run it once; the tokens then come straight from the engine, and
the engine tells the monitor when the call ends. A call whose engine fails before its first token, or
whose ticket expired on the way, is decided again with every failed engine named. A balancer that
serves a cascade answers a decision FAILED_PRECONDITION (it must read each answer to judge it): the
call then goes through its relay, ``Balancer.Generate``. hetflow's Python
client (``HetflowClient(direct=True)``) and the gateway (``gateway.direct``) both stream this way, each
deciding on a stream of decisions (``Balancer.DecideStream``): the client on one, the gateway on one per
tenant's key.

Given an HTTP client (``model_server``), a call whose engine fronts a model server of its own (the
``vllm-server`` backend) streams from that server instead (``Engine.Hold``): the engine queues the call
as any other and answers its turn with the request to send; the tokens then come straight from the
server, and the engine is told how the stream ended, so no Python process relays them. An engine that
answers UNIMPLEMENTED (no model server), or whose server this caller cannot connect to, is streamed
from as above, and not asked again (``model_server_less``).

``DirectCall`` reads as the balancer's ``Generate`` stream does: iterate it, or ``read()`` chunk by chunk
(``grpc.aio.EOF`` at the end), and ``cancel()`` it; its chunks are ``GenerateChunk``s with the model,
engine and receipt on the first and usage on the last, as the relay sends them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from typing import Any, AsyncGenerator, AsyncIterator, Callable, Sequence

import grpc

from hetflow.core.errors import DeadlineExceeded, HetflowError, Unavailable
from hetflow.runtime.accept_wait import sent_timeout
from hetflow.runtime.decision_stream import DecisionStream
from hetflow.runtime.http1 import Http1Client, HttpConnectError, HttpError
from hetflow.runtime.interceptors import REDISPATCHABLE, rpc_error, status_of
from hetflow.runtime.vllm_stream import stream_completion
from hetflow.v1 import balancer_pb2, balancer_pb2_grpc, common_pb2, engine_pb2, engine_pb2_grpc


class DirectCall:
    def __init__(self, balancer: balancer_pb2_grpc.BalancerStub,
                 engine_at: Callable[[str], engine_pb2_grpc.EngineStub], request: balancer_pb2.GenerateRequest,
                 timeout_s: float | None = None, metadata: Sequence[tuple[str, str]] = (),
                 model_server: Http1Client | None = None, model_server_less: set[str] | None = None,
                 decisions: DecisionStream | None = None, balancer_connected: Callable[[], bool] | None = None) -> None:
        """``engine_at``: the engine stub for an address (channels are the caller's to keep);
        ``metadata``: sent with the decision and the stream (a tenant's API key); ``model_server``: the
        client to stream from an engine's model server with (None: always from the engine);
        ``model_server_less``: addresses of engines known to have none (the caller's to keep);
        ``decisions``: the caller's stream of decisions (``Balancer.DecideStream``, its metadata the
        caller's); None: each decision its own ``Decide``, with ``metadata``; ``balancer_connected``: whether
        the channel to the balancer is connected now, for the timeout a call is sent with
        (``hetflow.runtime.accept_wait.sent_timeout``; None: taken as connected)."""
        self._balancer, self._engine_at, self._decisions = balancer, engine_at, decisions
        self._http = model_server
        self._balancer_connected = balancer_connected
        self._model_server_less = model_server_less if model_server_less is not None else set()
        self._call = balancer_pb2.GenerateRequest()
        self._call.CopyFrom(request)
        self._call.request_id = self._call.request_id or uuid.uuid4().hex  # the same id each time it is decided
        self._deadline_s = time.monotonic() + timeout_s if timeout_s is not None else None
        self._metadata = tuple(metadata) or None
        self._current: Any = None
        """The gRPC call in progress (the decision, then the engine's stream or hold): what ``cancel`` cancels."""
        self._reading: asyncio.Task[Any] | None = None
        """The task awaiting the model server's next read, while it does: ``cancel`` interrupts it."""
        self._cancelled = False
        self._chunks: AsyncGenerator[balancer_pb2.GenerateChunk, None] = self._run()

    def __aiter__(self) -> AsyncIterator[balancer_pb2.GenerateChunk]:
        return self

    async def __anext__(self) -> balancer_pb2.GenerateChunk:
        return await self._chunks.__anext__()

    async def read(self) -> Any:
        """The next chunk, or ``grpc.aio.EOF`` after the last."""
        try:
            return await self._chunks.__anext__()
        except StopAsyncIteration:
            return grpc.aio.EOF

    def cancel(self) -> None:
        """Stop the call: the engine aborts it and ends its entry (a decision not yet streamed is
        reconciled away by the monitor once its ticket can no longer be used)."""
        self._cancelled = True
        if self._current is not None:
            self._current.cancel()
        if self._reading is not None:
            self._reading.cancel()  # closes the model server's stream, on which it aborts the call

    def _left_s(self) -> float | None:
        return self._deadline_s - time.monotonic() if self._deadline_s is not None else None

    def _with_timeout(self, timeout_s: float | None) -> tuple[tuple[str, str], ...] | None:
        """The call's metadata with the timeout it is sent with, so the balancer can tell how long it
        waited to be taken (``hetflow.runtime.accept_wait``)."""
        connected = self._balancer_connected is None or self._balancer_connected()
        return (*(self._metadata or ()), *sent_timeout(timeout_s, connected)) or None

    async def aclose(self) -> None:
        """Stop reading: the engine's stream is cancelled, so the engine aborts the call."""
        await self._chunks.aclose()

    async def _run(self) -> AsyncGenerator[balancer_pb2.GenerateChunk, None]:
        failed: list[balancer_pb2.FailedDispatch] = []
        decision: balancer_pb2.DispatchDecision | None = None
        while True:
            if self._cancelled:   # as an attempt failed: no decision for nobody
                raise asyncio.CancelledError
            if decision is None:
                decision = await self._decide(failed)
                if decision is None:  # a balancer serving a cascade decides as it streams
                    async with contextlib.aclosing(self._relayed()) as relayed_chunks:
                        async for relayed in relayed_chunks:
                            yield relayed
                    return
                if self._cancelled:
                    raise asyncio.CancelledError
            held = self._http is not None and decision.engine_address not in self._model_server_less
            chunks = self._held(decision) if held else self._from_engine(decision)
            first = True
            try:
                async for chunk in chunks:
                    yield chunk
                    first = False
                return
            except ModelServerUnreachable:
                self._model_server_less.add(decision.engine_address)  # decided again: streamed from the engine
                decision = None
            except grpc.aio.AioRpcError as exc:
                if first and exc.code() == grpc.StatusCode.UNIMPLEMENTED and held:
                    self._model_server_less.add(decision.engine_address)  # its ticket unused: the same decision,
                    continue                                              # streamed from the engine
                if not first or exc.code() not in REDISPATCHABLE:
                    raise
                failed.append(balancer_pb2.FailedDispatch(engine_id=decision.engine_id, code=exc.code().name,
                                                          details=exc.details() or ""))
                decision = None
            finally:
                await chunks.aclose()

    async def _decide(self, failed: list[balancer_pb2.FailedDispatch]) -> balancer_pb2.DispatchDecision | None:
        """The balancer's decision, naming the attempts that failed; None from a balancer that relays the
        call itself (one serving a cascade answers a first Decide FAILED_PRECONDITION)."""
        left_s = self._left_s()
        decide = balancer_pb2.DecideRequest(call=self._call, failed=failed)
        self._current = asyncio.ensure_future(self._decisions.decide(decide, left_s)) \
            if self._decisions is not None else \
            self._balancer.Decide(decide, timeout=left_s, metadata=self._with_timeout(left_s))
        try:
            return await self._current
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.FAILED_PRECONDITION or failed:
                raise
            return None

    async def _from_engine(self, decision: balancer_pb2.DispatchDecision
                           ) -> AsyncGenerator[balancer_pb2.GenerateChunk, None]:
        stream = self._current = self._engine_at(decision.engine_address).Generate(
            decision.engine_request, timeout=self._left_s(), metadata=self._metadata)
        first, queued_s = True, 0.0
        try:
            async for chunk in stream:
                queued_s += chunk.queued_s
                yield _as_relayed(decision, chunk.text, chunk.output_tokens, chunk.prompt_tokens, chunk.finish_reason,
                                  chunk.finished, first, queued_s)
                first = False
        finally:
            stream.cancel()  # a no-op once finished; a caller that stops reading aborts the call

    async def _held(self, decision: balancer_pb2.DispatchDecision) -> AsyncGenerator[balancer_pb2.GenerateChunk, None]:
        """The call's turn from its engine (``Engine.Hold``), its tokens from the engine's model server, and
        how the stream ended back to the engine. A failure before the first token answers as the engine's
        stream would (UNAVAILABLE, or INVALID_ARGUMENT for the server's refusal of the request)."""
        assert self._http is not None
        hold = self._current = self._engine_at(decision.engine_address).Hold(timeout=self._left_s(),
                                                                             metadata=self._metadata)
        end = engine_pb2.HoldEnd()
        chunks: AsyncGenerator[balancer_pb2.GenerateChunk, None] | None = None
        try:
            await hold.write(engine_pb2.HoldMessage(request=decision.engine_request))
            grant = await hold.read()
            if grant is grpc.aio.EOF:  # a failed hold raises its status on read: this one ended OK, unanswered
                raise rpc_error(grpc.StatusCode.UNAVAILABLE, "the engine ended the hold without a turn")
            chunks = self._from_model_server(decision, grant, end)
            while (chunk := await self._next_read(chunks)) is not None:
                if chunk.finished:  # the engine (and through it the monitor) hears of the end before the caller
                    await _end_hold(hold, end)
                yield chunk
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self._cancelled and task is not None and task.cancelling():
                task.uncancel()  # the call was cancelled, not the caller's task: it ends as a cancelled stream does
            raise
        except HttpConnectError as exc:  # nothing sent: the server is not reachable from here
            end.error = grpc.StatusCode.UNAVAILABLE.name
            raise ModelServerUnreachable(grant.url) from exc
        except (HttpError, HetflowError) as exc:
            code, details = status_of(exc) if isinstance(exc, HetflowError) else (
                grpc.StatusCode.UNAVAILABLE, f"the model server failed the call: {type(exc).__name__}: {exc}")
            end.error = code.name
            raise rpc_error(code, details, getattr(exc, "retry_after_s", None)) from exc
        finally:
            if chunks is not None:
                await chunks.aclose()  # a caller that stopped reading closes the model server's stream
            await _end_hold(hold, end)

    async def _next_read(self, chunks: AsyncGenerator[balancer_pb2.GenerateChunk, None]
                         ) -> balancer_pb2.GenerateChunk | None:
        """The next chunk from the model server, within the call's deadline; ``cancel`` interrupts the wait
        (only the wait: not what the caller does with a chunk)."""
        if self._cancelled:
            raise asyncio.CancelledError
        self._reading = asyncio.current_task()
        try:
            async with asyncio.timeout(self._left_s()):
                return await anext(chunks, None)
        except TimeoutError as exc:
            raise DeadlineExceeded("the call's deadline passed while the model server streamed it") from exc
        finally:
            self._reading = None

    async def _from_model_server(self, decision: balancer_pb2.DispatchDecision, grant: engine_pb2.HoldGrant,
                                 end: engine_pb2.HoldEnd) -> AsyncGenerator[balancer_pb2.GenerateChunk, None]:
        assert self._http is not None
        first = True
        async for events in stream_completion(self._http, grant.url, grant.body_json, grant.request_id,
                                              grant.prompt_tokens):
            last, finished = events[-1], bool(events[-1].finish_reason)
            if first:
                end.started_unix_s = time.time()
            end.output_tokens, end.finish_reason = last.output_tokens, last.finish_reason
            yield _as_relayed(decision, "".join(e.text for e in events), last.output_tokens, last.prompt_tokens,
                              last.finish_reason, finished, first, grant.queued_s)
            first = False
            if finished:
                return
        raise Unavailable("the model server ended the stream without a finish reason")

    async def _relayed(self) -> AsyncGenerator[balancer_pb2.GenerateChunk, None]:
        left_s = self._left_s()
        self._current = call = self._balancer.Generate(self._call, timeout=left_s, metadata=self._with_timeout(left_s))
        try:
            async for chunk in call:
                yield chunk
        finally:
            call.cancel()  # a no-op once it ended; a caller that stopped reading ends the balancer's stream


class ModelServerUnreachable(Exception):
    """The granted model server could not be connected to from this caller (an engine whose server listens
    on its own host's loopback, say): the call is decided again and streamed through the engine."""


async def _end_hold(hold: Any, end: engine_pb2.HoldEnd) -> None:
    """Tell the engine how the stream ended and close the hold; an engine already gone needs no telling."""
    if hold.done():
        return
    try:
        await hold.write(engine_pb2.HoldMessage(end=end))
        await hold.done_writing()
        await hold.code()  # the engine has freed the slot
    except (grpc.aio.AioRpcError, grpc.aio.UsageError, asyncio.InvalidStateError):
        hold.cancel()  # the engine then cancels the call and frees its slot
    except BaseException:  # cancelled while telling it: the hold must not stay open
        hold.cancel()
        raise


def _as_relayed(decision: balancer_pb2.DispatchDecision, text: str, output_tokens: int, prompt_tokens: int,
                finish_reason: str, finished: bool, first: bool, queued_s: float) -> balancer_pb2.GenerateChunk:
    """A chunk of the call (from its engine or its model server) as the balancer's relay sends it: where
    the call ran and its receipt on the first, usage and the engine queue's wait on the last."""
    out = balancer_pb2.GenerateChunk(request_id=decision.request_id, text=text, output_tokens=output_tokens,
                                     finished=finished, finish_reason=finish_reason)
    if first:
        out.model, out.engine_id = decision.model, decision.engine_id
        if decision.HasField("receipt"):
            out.receipt.CopyFrom(decision.receipt)
    if finished:
        out.usage.CopyFrom(common_pb2.Usage(prompt_tokens=prompt_tokens, output_tokens=output_tokens))
        out.queued_s = queued_s
    return out
