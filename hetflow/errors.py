"""Domain exceptions, each carrying the gRPC status code it maps to.

Servicers raise these; the server interceptor (hetflow.runtime.interceptors) turns them into
statuses, so no servicer builds a status by hand.
"""

from __future__ import annotations

import grpc


class HetflowError(Exception):
    code: grpc.StatusCode = grpc.StatusCode.INTERNAL


class InvalidArgument(HetflowError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(HetflowError):
    code = grpc.StatusCode.NOT_FOUND


class ResourceExhausted(HetflowError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class Unavailable(HetflowError):
    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceeded(HetflowError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


def status_of(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The status a failed call answers with: domain errors carry theirs, ValueError is bad input."""
    if isinstance(exc, HetflowError):
        return exc.code, str(exc)
    if isinstance(exc, ValueError):
        return grpc.StatusCode.INVALID_ARGUMENT, str(exc)
    if isinstance(exc, grpc.aio.AioRpcError):
        return exc.code(), exc.details() or ""
    return grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}"
