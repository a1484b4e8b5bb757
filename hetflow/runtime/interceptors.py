"""One server interceptor: per-method metrics, log context, the checks every request gets
(``message_checks``), and exceptions -> status codes."""

from __future__ import annotations

import asyncio
import collections.abc
import contextlib
import inspect
import time
from typing import Any, AsyncIterator, Awaitable, Callable

import grpc
import structlog
from prometheus_client import Counter, Histogram

from hetflow.core import errors
from hetflow.runtime.logs import get_logger
from hetflow.runtime.message_checks import lenient, problem
from hetflow.runtime.security import (
    CURRENT_CALLER,
    PermissionDenied,
    SecurityConfig,
    Unauthenticated,
    authorize,
    caller_of,
)

RPC_HANDLED = Counter("hetflow_rpc_handled_total", "RPCs handled", ["service", "method", "code"])
RPC_LATENCY_S = Histogram(
    "hetflow_rpc_latency_seconds", "RPC latency (whole stream for streaming calls)",
    ["service", "method"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
log = get_logger(__name__)
RETRY_PUSHBACK_KEY = "grpc-retry-pushback-ms"
"""Trailing metadata of a RESOURCE_EXHAUSTED answer that may succeed later: how long to wait (gRPC A6)."""
NEVER_RETRY_PUSHBACK = "-1"
"""The pushback of a refusal that trying again cannot help (gRFC A6: -1, no retry): RESOURCE_EXHAUSTED
without a retry hint, a call no engine can ever hold."""
REDISPATCHABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNKNOWN,
                  grpc.StatusCode.INTERNAL, grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.CANCELLED)
"""An engine's failures before the first token that another engine may not share (a refusal of the
call itself, INVALID_ARGUMENT, would be the same everywhere). FAILED_PRECONDITION: the dispatch ticket
expired before the engine read the request (a stalled engine), so the call is decided again.
CANCELLED: the engine's server cancelled the call, as gRPC does to a call that arrives as the server
stops (a drained engine, the instant its drain begins; docs/reliability.md); a caller that cancels its
own call sees ``asyncio.CancelledError``, never this status.
The balancer's relay and the direct path's callers (``direct_call``) both decide again on these."""

STATUS_OF: dict[type[errors.HetflowError], grpc.StatusCode] = {
    errors.InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    errors.NotFound: grpc.StatusCode.NOT_FOUND,
    errors.ResourceExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.Unavailable: grpc.StatusCode.UNAVAILABLE,
    errors.DeadlineExceeded: grpc.StatusCode.DEADLINE_EXCEEDED,
    errors.FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    errors.AlreadyExists: grpc.StatusCode.ALREADY_EXISTS,
    errors.Aborted: grpc.StatusCode.ABORTED,
    errors.Unimplemented: grpc.StatusCode.UNIMPLEMENTED,
}
"""The status each domain error answers with; any other HetflowError is INTERNAL."""


def rpc_error(code: grpc.StatusCode, details: str, retry_after_s: float | None = None) -> grpc.aio.AioRpcError:
    """A status raised on the client's side as the RPC that ended with it would raise it (a batch's item,
    a stream read from elsewhere), with the server's retry hint as gRPC's pushback when it gave one."""
    trailing = grpc.aio.Metadata()
    pushback = pushback_of(code, retry_after_s)
    if pushback is not None:
        trailing.add(RETRY_PUSHBACK_KEY, pushback)
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailing, details)


def pushback_of(code: grpc.StatusCode, retry_after_s: float | None) -> str | None:
    """The retry pushback a failure of ``code`` carries: its hint in ms, ``NEVER_RETRY_PUSHBACK`` for a
    hint-less RESOURCE_EXHAUSTED, else none."""
    if retry_after_s is not None:
        return str(max(0, round(retry_after_s * 1e3)))
    return NEVER_RETRY_PUSHBACK if code == grpc.StatusCode.RESOURCE_EXHAUSTED else None


def never_fits(exc: grpc.aio.AioRpcError) -> bool:
    """A refusal that trying again cannot help: the call can never fit (``NEVER_RETRY_PUSHBACK``)."""
    pushback = dict(exc.trailing_metadata() or ()).get(RETRY_PUSHBACK_KEY)
    return exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and pushback == NEVER_RETRY_PUSHBACK


def retry_pushback_s(exc: grpc.aio.AioRpcError) -> float | None:
    """The retry hint a refusal carried (gRPC's pushback, ms), in seconds; None when it carried none, or
    -1 (trying again cannot help)."""
    value = dict(exc.trailing_metadata() or ()).get(RETRY_PUSHBACK_KEY)
    return int(value) / 1e3 if isinstance(value, str) and value.isdigit() else None


def status_of(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The status a failed call answers with: domain errors carry theirs, ValueError is bad input."""
    if isinstance(exc, errors.HetflowError):
        code = next((c for cls, c in STATUS_OF.items() if isinstance(exc, cls)), grpc.StatusCode.INTERNAL)
        return code, str(exc)
    if isinstance(exc, Unauthenticated):
        return grpc.StatusCode.UNAUTHENTICATED, str(exc)
    if isinstance(exc, PermissionDenied):
        return grpc.StatusCode.PERMISSION_DENIED, str(exc)
    if isinstance(exc, ValueError):
        return grpc.StatusCode.INVALID_ARGUMENT, str(exc)
    if isinstance(exc, grpc.aio.AioRpcError):
        return exc.code(), exc.details() or ""
    return grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}"


class ServiceInterceptor(grpc.aio.ServerInterceptor):
    """Wraps every unary, server-streaming and bidirectional handler of the service: who calls and whether
    they may (``hetflow.runtime.security``), then the message checks (each message of a stream as it is
    read), then the handler."""

    def __init__(self, service: str, security: SecurityConfig | None = None) -> None:
        self._service, self._security = service, security or SecurityConfig()
        self._service_token = self._security.service_token()

    async def intercept_service(self, continuation: Callable[..., Awaitable[Any]], details: Any) -> Any:
        handler = await continuation(details)
        if handler is None:
            return None
        path = details.method
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(path, handler.unary_unary),
                request_deserializer=lenient(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                self._stream(path, handler.unary_stream),
                request_deserializer=lenient(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        if handler.stream_stream:
            return grpc.stream_stream_rpc_method_handler(
                self._stream(path, handler.stream_stream),
                request_deserializer=lenient(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        return handler

    def _admit(self, path: str, request: Any, context: grpc.aio.ServicerContext, checks_each: bool = False) -> Any:
        """Who calls, whether they may, and whether the message is sane (each message of a request stream
        as it is read, unless the handler ``checks_each`` itself: ``batch_streams.checks_each_message``);
        the caller is kept for the handler. Returns the request to hand it."""
        caller = caller_of(path, context, self._security, self._service_token)
        authorize(path, caller)
        CURRENT_CALLER.set(caller)
        if isinstance(request, collections.abc.AsyncIterator):
            return request if checks_each else _checked(request)
        _check(request)
        return request

    def _unary(self, path: str, behaviour: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        method = path.rsplit("/", 1)[-1]

        async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> Any:
            structlog.contextvars.bind_contextvars(rpc=method)
            start = time.perf_counter()
            code = grpc.StatusCode.OK
            try:
                return await behaviour(self._admit(path, request, context), context)
            except asyncio.CancelledError:
                code = _cancelled(method, start, context)
                raise
            except Exception as exc:  # noqa: BLE001 - every failure becomes a status
                code = _code_of(exc, context)
                await _abort(context, exc, method)
            finally:
                self._observe(method, start, code)

        return wrapped

    def _stream(self, path: str, behaviour: Callable[..., Any]) -> Callable[..., Any]:
        """A server-streaming or bidirectional handler (its request one message or a stream of them)."""
        if not inspect.isasyncgenfunction(behaviour):
            # A streaming handler that writes with ``context.write`` (grpc's own Health/Watch) is a
            # coroutine: awaited as a unary one is, its writes go straight to the stream.
            return self._unary(path, behaviour)
        method = path.rsplit("/", 1)[-1]
        checks_each = getattr(behaviour, "checks_each_message", False)

        async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> None:
            structlog.contextvars.bind_contextvars(rpc=method)
            start = time.perf_counter()
            code = grpc.StatusCode.OK
            try:
                # Written with ``context.write``, not yielded: a caller's cancel that lands while a message
                # is being sent then reaches this frame, and ``aclosing`` closes the handler's generator at
                # once. Yielded, the cancel lands in gRPC's send loop; the generator is left suspended
                # until the garbage collector closes it with GeneratorExit, so the engine's work for a
                # caller that left goes on and the call is counted OK (run AO2, docs/reliability.md).
                async with contextlib.aclosing(behaviour(self._admit(path, request, context, checks_each),
                                                          context)) as items:
                    async for item in items:
                        await context.write(item)
            except asyncio.CancelledError:
                code = _cancelled(method, start, context)
                raise
            except Exception as exc:  # noqa: BLE001
                code = _code_of(exc, context)
                await _abort(context, exc, method)
            finally:
                self._observe(method, start, code)

        return wrapped

    def _observe(self, method: str, start: float, code: grpc.StatusCode) -> None:
        RPC_HANDLED.labels(self._service, method, code.name).inc()
        RPC_LATENCY_S.labels(self._service, method).observe(time.perf_counter() - start)


def _check(request: Any) -> None:
    if (found := problem(request)) is not None:
        raise errors.InvalidArgument(found)


async def _checked(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    async for request in requests:
        _check(request)
        yield request


def _cancelled(method: str, start: float, context: grpc.aio.ServicerContext) -> grpc.StatusCode:
    """A handler cancelled (its caller went away, or the server is stopping): counted as CANCELLED, and
    logged with whether gRPC saw the caller cancel, so a cancellation nobody asked for shows."""
    log.info("rpc_cancelled", method=method, after_ms=round((time.perf_counter() - start) * 1e3, 1),
             caller_cancelled=context.cancelled())
    return grpc.StatusCode.CANCELLED


def _code_of(exc: Exception, context: grpc.aio.ServicerContext) -> grpc.StatusCode:
    """The status a failed handler ends with (one that aborted itself set it on its context)."""
    if isinstance(exc, grpc.aio.AbortError):
        return context.code() or grpc.StatusCode.UNKNOWN
    return status_of(exc)[0]


async def _abort(context: grpc.aio.ServicerContext, exc: Exception, method: str) -> None:
    """Answer the failure with its status (``context.abort`` raises, ending the handler)."""
    if isinstance(exc, grpc.aio.AbortError):
        raise exc
    code, message = status_of(exc)
    if code == grpc.StatusCode.INTERNAL:
        log.exception("rpc_failed", method=method)
    else:
        log.info("rpc_rejected", method=method, code=code.name, reason=message)
    pushback = pushback_of(code, getattr(exc, "retry_after_s", None))
    if pushback is not None:  # gRPC's retry pushback: clients (and gRPC's own retry policy) wait this long
        context.set_trailing_metadata(((RETRY_PUSHBACK_KEY, pushback),))
    await context.abort(code, message)
