"""Batches on one long-lived bidirectional stream instead of one unary RPC each.

A balancer asks the monitor, the router and the predictor one batch per turn of its event loop
(``hetflow.runtime.coalescing``). As unary RPCs each batch pays gRPC's per-call cost on both sides: a
new HTTP/2 stream, headers, the server's interceptors, a status. On a stream opened once, a batch costs
one message each way (measured on the development machine: about 0.50 ms of CPU for a unary round trip,
client and server together, against 0.28 ms for a message and its answer on an open stream).

The contract: each request message is answered by exactly one reply, in the order asked. The reply
carries the status its unary method would have ended with (``BatchStatus``; 0 OK), so a failed batch
fails only itself and its caller sees the ``AioRpcError`` the unary call would have raised. The stream
ending or failing fails every batch still unanswered with UNAVAILABLE (the service went away); the next
batch opens a new stream. A service without the stream method (UNIMPLEMENTED) is asked by its unary
method (``BatchStream.supported``; the stream is tried again a minute later), so the client can be
upgraded first.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from typing import Any, AsyncIterator, Awaitable, Callable, Generic, Protocol, TypeVar

import grpc

from hetflow.runtime.interceptors import rpc_error, status_of
from hetflow.runtime.logs import get_logger
from hetflow.runtime.message_checks import problem
from hetflow.v1 import common_pb2

log = get_logger(__name__)

RequestT = TypeVar("RequestT")
ReplyT = TypeVar("ReplyT", bound="HasStatus")
STATUS_OF_CODE = {code.value[0]: code for code in grpc.StatusCode}
"""gRPC's status codes by number (``BatchStatus.code``, ``AdmitOutcome.code``)."""
MAX_UNANSWERED = 1024
"""Batches a client lets wait for answers on one stream; past it the stream is taken for stuck and
opened again (every batch then waiting fails UNAVAILABLE)."""
RETRY_UNSUPPORTED_S = 60.0
"""How long a client asks a service without the stream by its unary method before it tries the stream again."""
HEADERS_WAIT_S = 1.0
"""How long a stream's first message waits for the service's headers (``headers_or_end``)."""


def stream_worth_trying(unsupported_since_s: float | None) -> bool:
    """Whether to ask a service on its stream: not for ``RETRY_UNSUPPORTED_S`` after it answered
    UNIMPLEMENTED (at ``unsupported_since_s``, monotonic), then again (the service may have been upgraded)."""
    return unsupported_since_s is None or time.monotonic() - unsupported_since_s > RETRY_UNSUPPORTED_S


async def headers_or_end(call: Any) -> None:
    """Wait until the service has sent the stream's headers or ended the stream, at most ``HEADERS_WAIT_S``:
    the client's first write comes after it. A service without the stream ends it UNIMPLEMENTED at once, and
    a write racing that end makes gRPC's core end the call INTERNAL ("Internal error from Core") instead,
    which would hide that the stream is missing (one stream in about 1,500 to such a service on the loaded
    development machine). hetflow's services send the headers as a stream opens (``answer_in_order``,
    ``Balancer.DecideStream``), so this costs a round trip a stream; one that sends them later is written
    to after the wait."""
    with contextlib.suppress(TimeoutError, grpc.aio.AioRpcError):
        async with asyncio.timeout(HEADERS_WAIT_S):
            await call.initial_metadata()


class HeadersSender(Protocol):
    async def send_initial_metadata(self, initial_metadata: Any) -> None: ...


class HasStatus(Protocol):
    @property
    def status(self) -> common_pb2.BatchStatus: ...


def checks_each_message(handler: Callable[..., Any]) -> Callable[..., Any]:
    """Marks a stream handler that checks each request message itself and answers a bad one with
    INVALID_ARGUMENT in its reply (``answer_in_order``): the server's interceptor then leaves the
    messages to it rather than ending the whole stream at the first bad one."""
    handler.checks_each_message = True  # type: ignore[attr-defined]
    return handler


async def answer_in_order(requests: AsyncIterator[RequestT], answer: Callable[[RequestT], Awaitable[ReplyT]],
                          reply_type: Callable[..., ReplyT], context: HeadersSender,
                          max_in_flight: int = 8) -> AsyncIterator[ReplyT]:
    """The server's side: the headers at once (the client's first write waits for them, ``headers_or_end``),
    then each request answered by ``answer``, up to ``max_in_flight`` at once, the replies yielded in the
    order the requests came. A request that fails (a bad message, or ``answer`` raising) is answered by a
    ``reply_type`` carrying only the status its unary method would have ended with."""
    await context.send_initial_metadata(())

    def failed(status: common_pb2.BatchStatus) -> ReplyT:
        return reply_type(status=status)

    answering: asyncio.Queue[asyncio.Task[ReplyT] | None] = asyncio.Queue(maxsize=max_in_flight)

    async def checked(request: RequestT) -> ReplyT:
        if (found := problem(request)) is not None:
            return failed(common_pb2.BatchStatus(code=grpc.StatusCode.INVALID_ARGUMENT.value[0], details=found))
        return await answer(request)

    async def read() -> None:
        async for request in requests:
            await answering.put(asyncio.get_running_loop().create_task(checked(request)))
        await answering.put(None)

    reader = asyncio.get_running_loop().create_task(read())
    getting: asyncio.Future[asyncio.Task[ReplyT] | None] | None = None
    try:
        while True:
            getting = asyncio.ensure_future(answering.get())
            await asyncio.wait({getting, reader}, return_when=asyncio.FIRST_COMPLETED)
            if not getting.done():  # the request stream failed before its end
                getting.cancel()
                reader.result()
                return
            task = getting.result()
            if task is None:
                return
            try:
                yield await task
            except Exception as exc:  # noqa: BLE001 - the batch's own status, as its unary method's
                code, details = status_of(exc)
                if code == grpc.StatusCode.INTERNAL:
                    log.exception("batch_failed")
                yield failed(common_pb2.BatchStatus(code=code.value[0], details=details))
    finally:
        reader.cancel()
        if getting is not None:
            getting.cancel()  # the handler cancelled while it waited for the next request
        while not answering.empty():
            if (task := answering.get_nowait()) is not None:
                task.cancel()


class BatchStream(Generic[RequestT, ReplyT]):
    """The client's side: ``ask(request)`` sends it on the stream ``open_stream()`` opens (once, and again
    after the stream ends) and returns its reply, or raises its status as an ``AioRpcError``."""

    def __init__(self, open_stream: Callable[[], Any], name: str, timeout_s: float) -> None:
        """``open_stream()``: the stub's stream method, called with no request iterator (this writes)."""
        self._open_stream, self.name, self.timeout_s = open_stream, name, timeout_s
        self._unsupported_since_s: float | None = None
        """When the service answered UNIMPLEMENTED (monotonic s): the caller asks by the unary method
        instead, and the stream is tried again after ``RETRY_UNSUPPORTED_S`` (the service upgraded)."""
        self._outbox: asyncio.Queue[tuple[RequestT, asyncio.Future[ReplyT]]] | None = None
        self._unanswered: collections.deque[asyncio.Future[ReplyT]] = collections.deque()
        self._reader: asyncio.Task[None] | None = None

    @property
    def supported(self) -> bool:
        """Whether to ask on the stream: False for ``RETRY_UNSUPPORTED_S`` after the service answered
        UNIMPLEMENTED."""
        return stream_worth_trying(self._unsupported_since_s)

    async def ask_or(self, request: RequestT, unary: Callable[[], Awaitable[ReplyT]]) -> ReplyT:
        """The reply on the stream; by ``unary()`` (the service's unary method) while the service has no
        such stream."""
        if self.supported:
            try:
                return await self.ask(request)
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                    raise
        return await unary()

    async def ask(self, request: RequestT) -> ReplyT:
        if self._outbox is None or len(self._unanswered) > MAX_UNANSWERED:
            self._open()
        assert self._outbox is not None
        answer: asyncio.Future[ReplyT] = asyncio.get_running_loop().create_future()
        self._outbox.put_nowait((request, answer))
        try:
            async with asyncio.timeout(self.timeout_s):  # not wait_for: on 3.11 it can swallow the caller's cancel
                reply = await answer
        except TimeoutError:
            raise rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED,
                            f"no answer on {self.name} within {self.timeout_s:g}s") from None
        if reply.status.code:
            raise rpc_error(STATUS_OF_CODE.get(reply.status.code, grpc.StatusCode.UNKNOWN), reply.status.details)
        return reply

    def service_restarted(self) -> None:
        """A restarted service may have the stream its predecessor lacked (a stream of the old process
        has failed already, and the next batch opens one to the new)."""
        self._unsupported_since_s = None

    async def close(self) -> None:
        reader = self._reader
        self._close("the client closed")
        if reader is not None:
            await asyncio.gather(reader, return_exceptions=True)

    def _open(self) -> None:
        self._close("opened again")
        outbox: asyncio.Queue[tuple[RequestT, asyncio.Future[ReplyT]]] = asyncio.Queue()
        self._outbox, self._unanswered = outbox, collections.deque()
        call = self._open_stream()
        loop = asyncio.get_running_loop()
        writer = loop.create_task(self._write(call, outbox, self._unanswered))
        self._reader = loop.create_task(self._read(call, outbox, self._unanswered, writer))

    @staticmethod
    async def _write(call: Any, outbox: asyncio.Queue[tuple[RequestT, asyncio.Future[ReplyT]]],
                     unanswered: collections.deque[asyncio.Future[ReplyT]]) -> None:
        """Send the batches in the order asked, once the service's headers came or it ended the stream
        (``headers_or_end``), each counted as waiting for the next reply as it leaves; a failed write ends it
        (the reader sees the stream's status)."""
        await headers_or_end(call)
        while True:
            request, answer = await outbox.get()
            if answer.done():  # its caller gave up before it left
                continue
            unanswered.append(answer)
            try:
                await call.write(request)
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
                return

    async def _read(self, call: Any, outbox: asyncio.Queue[tuple[RequestT, asyncio.Future[ReplyT]]],
                    unanswered: collections.deque[asyncio.Future[ReplyT]], writer: asyncio.Task[None]) -> None:
        error = rpc_error(grpc.StatusCode.UNAVAILABLE, f"{self.name} ended")
        try:
            while (reply := await call.read()) is not grpc.aio.EOF:
                if unanswered and not (answer := unanswered.popleft()).done():
                    answer.set_result(reply)
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                self._unsupported_since_s = time.monotonic()
                error = exc
                log.warning("batch_stream_unimplemented", stream=self.name, fallback="unary batches")
            elif exc.code() != grpc.StatusCode.CANCELLED:
                error = rpc_error(grpc.StatusCode.UNAVAILABLE,
                                  f"{self.name} failed: {exc.code().name} {exc.details()}")
        except asyncio.CancelledError:
            error = rpc_error(grpc.StatusCode.UNAVAILABLE, f"{self.name} closed")
            raise
        finally:
            writer.cancel()
            call.cancel()
            if self._outbox is outbox:
                self._outbox = None
            _fail(unanswered, outbox, error)

    def _close(self, why: str) -> None:
        if self._reader is not None:
            self._reader.cancel()
            log.debug("batch_stream_closed", stream=self.name, why=why)
        self._reader, self._outbox = None, None


def _fail(unanswered: collections.deque[asyncio.Future[Any]], outbox: asyncio.Queue[tuple[Any, asyncio.Future[Any]]],
          error: BaseException) -> None:
    """Every batch of a stream that ended without its answer fails with ``error``."""
    waiting = list(unanswered)
    unanswered.clear()
    while not outbox.empty():
        waiting.append(outbox.get_nowait()[1])
    for answer in waiting:
        if not answer.done():
            answer.set_exception(error)
