"""One LLM call on the direct path (issue 34): decided by a balancer, streamed from the engine it names.

``Balancer.Decide`` answers with the engine's address and the engine request, which carries the
dispatch ticket that lets that engine run it once; the tokens then come straight from the engine, and
the engine tells the monitor when the call ends. A call whose engine fails before its first token, or
whose ticket expired on the way, is decided again with every failed engine named. A balancer that
serves a cascade answers a decision FAILED_PRECONDITION (it must read each answer to judge it): the
call then goes through its relay, ``Balancer.Generate``. hetflow's Python
client (``HetflowClient(direct=True)``) and the gateway (``gateway.direct``) both stream this way.

``DirectCall`` reads as the balancer's ``Generate`` stream does: iterate it, or ``read()`` chunk by chunk
(``grpc.aio.EOF`` at the end), and ``cancel()`` it; its chunks are ``GenerateChunk``s with the model,
engine and receipt on the first and usage on the last, as the relay sends them.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, AsyncGenerator, AsyncIterator, Callable, Sequence

import grpc

from hetflow.runtime.interceptors import REDISPATCHABLE
from hetflow.v1 import balancer_pb2, balancer_pb2_grpc, common_pb2, engine_pb2, engine_pb2_grpc


class DirectCall:
    def __init__(self, balancer: balancer_pb2_grpc.BalancerStub,
                 engine_at: Callable[[str], engine_pb2_grpc.EngineStub], request: balancer_pb2.GenerateRequest,
                 timeout_s: float | None = None, metadata: Sequence[tuple[str, str]] = ()) -> None:
        """``engine_at``: the engine stub for an address (channels are the caller's to keep);
        ``metadata``: sent with the decision and the stream (a tenant's API key)."""
        self._balancer, self._engine_at = balancer, engine_at
        self._call = balancer_pb2.GenerateRequest()
        self._call.CopyFrom(request)
        self._call.request_id = self._call.request_id or uuid.uuid4().hex  # the same id each time it is decided
        self._deadline_s = time.monotonic() + timeout_s if timeout_s is not None else None
        self._metadata = tuple(metadata) or None
        self._current: Any = None
        """The gRPC call in progress (the decision, then the engine's stream): what ``cancel`` cancels."""
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

    def _left_s(self) -> float | None:
        return self._deadline_s - time.monotonic() if self._deadline_s is not None else None

    async def aclose(self) -> None:
        """Stop reading: the engine's stream is cancelled, so the engine aborts the call."""
        await self._chunks.aclose()

    async def _run(self) -> AsyncGenerator[balancer_pb2.GenerateChunk, None]:
        failed: list[balancer_pb2.FailedDispatch] = []
        while True:
            self._current = self._balancer.Decide(balancer_pb2.DecideRequest(call=self._call, failed=failed),
                                                  timeout=self._left_s(), metadata=self._metadata)
            try:
                decision = await self._current
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.FAILED_PRECONDITION or failed:
                    raise
                async for relayed in self._relayed():  # a balancer serving a cascade decides as it streams
                    yield relayed
                return
            if self._cancelled:
                raise asyncio.CancelledError
            stream = self._current = self._engine_at(decision.engine_address).Generate(
                decision.engine_request, timeout=self._left_s(), metadata=self._metadata)
            first, queued_s = True, 0.0
            try:
                async for chunk in stream:
                    queued_s += chunk.queued_s
                    yield _as_relayed(chunk, decision, first, queued_s)
                    first = False
                return
            except grpc.aio.AioRpcError as exc:
                if not first or exc.code() not in REDISPATCHABLE:
                    raise
                failed.append(balancer_pb2.FailedDispatch(engine_id=decision.engine_id, code=exc.code().name,
                                                          details=exc.details() or ""))
            finally:
                stream.cancel()  # a no-op once finished; a caller that stops reading aborts the call


    async def _relayed(self) -> AsyncGenerator[balancer_pb2.GenerateChunk, None]:
        self._current = self._balancer.Generate(self._call, timeout=self._left_s(), metadata=self._metadata)
        async for chunk in self._current:
            yield chunk


def _as_relayed(chunk: engine_pb2.EngineChunk, decision: balancer_pb2.DispatchDecision, first: bool,
                queued_s: float) -> balancer_pb2.GenerateChunk:
    """An engine's chunk as the balancer's relay sends it: where the call ran and its receipt on the
    first, usage and the engine queue's wait on the last."""
    out = balancer_pb2.GenerateChunk(request_id=decision.request_id, text=chunk.text,
                                     output_tokens=chunk.output_tokens, finished=chunk.finished,
                                     finish_reason=chunk.finish_reason)
    if first:
        out.model, out.engine_id = decision.model, decision.engine_id
        if decision.HasField("receipt"):
            out.receipt.CopyFrom(decision.receipt)
    if chunk.finished:
        out.usage.CopyFrom(common_pb2.Usage(prompt_tokens=chunk.prompt_tokens, output_tokens=chunk.output_tokens))
        out.queued_s = queued_s
    return out
