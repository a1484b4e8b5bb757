"""The client's side of ``Balancer.DecideStream``: many calls' decisions on one long-lived stream.

``decide`` answers as ``Balancer.Decide`` would: the dispatch decision, or the ``AioRpcError`` the call
would have ended with (a refusal's retry delay in its trailing metadata, as gRPC's retry pushback). Each
decision is tagged; the replies come as decided, in any order. A caller that stops waiting (cancelled)
sends its tag's cancel, so the balancer stops deciding it. A stream that breaks fails the decisions then
waiting with UNAVAILABLE and the next opens a new one; a balancer without the stream (UNIMPLEMENTED) is
asked by ``Decide`` (the stream tried again a minute later), so clients may be upgraded first. Each
message says when it was sent (seconds since the stream opened), so the balancer counts its wait before
it was read as it counts a ``Decide``'s (``hetflow.runtime.accept_wait``).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any, Sequence

import grpc

from hetflow.runtime.batch_streams import STATUS_OF_CODE, headers_or_end, stream_worth_trying
from hetflow.runtime.interceptors import retry_pushback_s, rpc_error
from hetflow.runtime.logs import get_logger
from hetflow.v1 import balancer_pb2, balancer_pb2_grpc

log = get_logger(__name__)


def _error(reply: balancer_pb2.DecideStreamReply) -> grpc.aio.AioRpcError:
    return rpc_error(STATUS_OF_CODE.get(reply.status.code, grpc.StatusCode.UNKNOWN), reply.status.details,
                     reply.retry_after_s if reply.retry_after_s > 0 else None)


class _Stream:
    """One open ``DecideStream``: the messages to send and the decisions waiting for their replies."""

    def __init__(self) -> None:
        self.opened_s = time.monotonic()
        self.outbox: asyncio.Queue[balancer_pb2.DecideStreamRequest] = asyncio.Queue()
        self.waiting: dict[int, asyncio.Future[balancer_pb2.DecideStreamReply]] = {}
        self.task: asyncio.Task[None] | None = None


class DecisionStream:
    def __init__(self, balancer: balancer_pb2_grpc.BalancerStub, metadata: Sequence[tuple[str, str]] = (),
                 refusal_attempts: int = 1) -> None:
        """``metadata``: sent once with the stream, and with each ``Decide`` of the fallback (a tenant's key);
        ``refusal_attempts``: how many times a refused decision (RESOURCE_EXHAUSTED with a retry hint) is
        sent in all on the stream, each after its hint and while its time allows, as gRPC's retry policy
        sends a refused ``Decide`` again (``hetflow.runtime.channels.refusal_retries``: the channel's own
        policy, set to as many, sends the fallback's)."""
        self._balancer, self._metadata = balancer, tuple(metadata) or None
        self._refusal_attempts = refusal_attempts
        self._tags = itertools.count(1)
        self._stream: _Stream | None = None
        self._unsupported_since_s: float | None = None

    @property
    def supported(self) -> bool:
        """Whether to decide on the stream (``stream_worth_trying``)."""
        return stream_worth_trying(self._unsupported_since_s)

    async def decide(self, request: balancer_pb2.DecideRequest,
                     timeout_s: float | None = None) -> balancer_pb2.DispatchDecision:
        """The decision ``Decide`` would answer within ``timeout_s`` (None: no limit)."""
        deadline_s = time.monotonic() + timeout_s if timeout_s is not None else None
        attempt = 1
        while True:
            left_s = deadline_s - time.monotonic() if deadline_s is not None else None
            if not self.supported:
                return await self._unary(request, left_s)
            try:
                return await self._on_stream(request, left_s)
            except grpc.aio.AioRpcError as exc:
                if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                    return await self._unary(request, left_s)
                hint_s = retry_pushback_s(exc)
                if (exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED or hint_s is None
                        or attempt == self._refusal_attempts
                        or (deadline_s is not None and time.monotonic() + hint_s >= deadline_s)):
                    raise
            await asyncio.sleep(hint_s)
            attempt += 1

    async def _unary(self, request: balancer_pb2.DecideRequest,
                     timeout_s: float | None) -> balancer_pb2.DispatchDecision:
        """``Decide``, for a balancer without the stream: a refusal is sent again by the channel's own retry
        policy, not here (else ``refusal_attempts`` times that)."""
        return await self._balancer.Decide(request, timeout=timeout_s, metadata=self._metadata)

    async def close(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None and stream.task is not None:
            stream.task.cancel()
            await asyncio.gather(stream.task, return_exceptions=True)

    async def _on_stream(self, request: balancer_pb2.DecideRequest,
                         timeout_s: float | None) -> balancer_pb2.DispatchDecision:
        if timeout_s is not None and timeout_s <= 0:
            raise rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "the decision's time ran out before it was sent")
        stream = self._stream if self._stream is not None else self._open()
        tag = next(self._tags)
        answer: asyncio.Future[balancer_pb2.DecideStreamReply] = asyncio.get_running_loop().create_future()
        stream.waiting[tag] = answer
        stream.outbox.put_nowait(balancer_pb2.DecideStreamRequest(
            tag=tag, decide=request, timeout_s=timeout_s or 0.0, sent_after_s=time.monotonic() - stream.opened_s))
        try:
            async with asyncio.timeout(timeout_s):  # not wait_for: on 3.11 it can swallow the caller's cancel
                reply = await answer
        except (asyncio.CancelledError, TimeoutError) as exc:
            if stream.waiting.pop(tag, None) is not None:  # still open and deciding: stop it there
                stream.outbox.put_nowait(balancer_pb2.DecideStreamRequest(tag=tag, cancel=True))
            if isinstance(exc, TimeoutError):
                raise rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, f"not decided within {timeout_s:g}s") from None
            raise
        if reply.status.code:
            raise _error(reply)
        return reply.decision

    def _open(self) -> _Stream:
        stream = self._stream = _Stream()
        stream.task = asyncio.get_running_loop().create_task(self._run(stream))
        return stream

    async def _run(self, stream: _Stream) -> None:
        call = self._balancer.DecideStream(metadata=self._metadata)
        writer = asyncio.get_running_loop().create_task(_write(call, stream.outbox))
        error = rpc_error(grpc.StatusCode.UNAVAILABLE, "the balancer's decision stream ended")
        try:
            while (reply := await call.read()) is not grpc.aio.EOF:
                if (answer := stream.waiting.pop(reply.tag, None)) is not None and not answer.done():
                    answer.set_result(reply)
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                self._unsupported_since_s = time.monotonic()
                log.warning("decision_stream_unimplemented", fallback="Decide")
                error = exc
            else:
                error = rpc_error(grpc.StatusCode.UNAVAILABLE,
                                  f"the balancer's decision stream failed: {exc.code().name} {exc.details()}")
        finally:
            writer.cancel()
            call.cancel()
            if self._stream is stream:
                self._stream = None
            waiting, stream.waiting = stream.waiting, {}
            for answer in waiting.values():
                if not answer.done():
                    answer.set_exception(error)


async def _write(call: Any, outbox: asyncio.Queue[balancer_pb2.DecideStreamRequest]) -> None:
    """Send the messages in the order asked, one write at a time, once the balancer's headers came or it
    ended the stream (``headers_or_end``: a balancer without the stream must be seen to answer
    UNIMPLEMENTED, so its decisions go by ``Decide``); a failed write ends it (the reader sees the
    stream's status)."""
    await headers_or_end(call)
    while True:
        message = await outbox.get()
        try:
            await call.write(message)
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
            return
