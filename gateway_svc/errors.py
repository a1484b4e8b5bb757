"""OpenAI-shaped errors, and the HTTP status each of the balancer's gRPC statuses answers with.

The body is OpenAI's: ``{"error": {"message", "type", "param", "code"}}`` (the OpenAI API reference,
"Error codes"), as vLLM's OpenAI server writes it (``vllm/entrypoints/openai/protocol.py``, ErrorResponse).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import grpc

HTTP_OF_STATUS: dict[grpc.StatusCode, tuple[int, str]] = {
    grpc.StatusCode.INVALID_ARGUMENT: (400, "invalid_request_error"),
    grpc.StatusCode.FAILED_PRECONDITION: (400, "invalid_request_error"),
    grpc.StatusCode.OUT_OF_RANGE: (400, "invalid_request_error"),
    grpc.StatusCode.UNAUTHENTICATED: (401, "authentication_error"),
    grpc.StatusCode.PERMISSION_DENIED: (403, "permission_error"),
    grpc.StatusCode.NOT_FOUND: (404, "not_found_error"),
    grpc.StatusCode.RESOURCE_EXHAUSTED: (429, "rate_limit_error"),
    grpc.StatusCode.CANCELLED: (499, "cancelled"),
    grpc.StatusCode.UNAVAILABLE: (503, "service_unavailable"),
    grpc.StatusCode.DEADLINE_EXCEEDED: (504, "timeout"),
}
"""Any other status is 500 ``internal_error``."""


@dataclass
class OpenAIError(Exception):
    """A request the gateway answers with an error instead of a completion."""

    status_code: int
    message: str
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def invalid(message: str, param: str | None = None, code: str | None = None) -> OpenAIError:
    return OpenAIError(400, message, "invalid_request_error", param, code)


def from_grpc(exc: grpc.aio.AioRpcError) -> OpenAIError:
    """The balancer's (or monitor's) failure as the client sees it."""
    status, kind = HTTP_OF_STATUS.get(exc.code(), (500, "internal_error"))
    return OpenAIError(status, exc.details() or exc.code().name, kind, None, exc.code().name.lower())
