"""The OpenAI-compatible HTTP gateway: an ASGI app in front of the balancer.

Routes as vLLM's OpenAI server has them: ``POST /v1/chat/completions``, ``POST /v1/completions``,
``POST /v1/responses``, ``GET /v1/responses/{id}``, ``GET /v1/models``, ``GET /health``, ``GET /metrics``.
A client changes its base URL only.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Awaitable, Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway_svc.config import GatewayConfig
from gateway_svc.metrics import REQUEST_FAILURE
from gateway_svc.response_store import ResponseStore, StoredResponse
from gateway_svc.responses import CallResponse, Reply
from gateway_svc.responses_api import ResponsesReply
from hetflow.runtime.channels import open_channel
from hetflow.runtime.decision_stream import DecisionStream
from hetflow.runtime.direct_call import DirectCall
from hetflow.runtime.http1 import Http1Client
from hetflow.runtime.logs import get_logger
from hetflow.runtime.openai_request import (
    OpenAIError,
    ParsedRequest,
    from_grpc,
    invalid,
    parse,
    refuse_what_the_engines_cannot_give,
)
from hetflow.runtime.responses_request import parse_responses
from hetflow.runtime.security import Unauthenticated, bearer, tenant_of_key
from hetflow.v1 import balancer_pb2, balancer_pb2_grpc, engine_pb2_grpc, monitor_pb2, monitor_pb2_grpc

log = get_logger(__name__)

CLIENT_CLOSED_REQUEST = 499
"""The status counted for a client that left before its request was whole (nginx's 499)."""


class Gateway:
    """The gateway's connections and the served-model list it caches."""

    def __init__(self, cfg: GatewayConfig) -> None:
        self.cfg = cfg
        self._channels: list[grpc.aio.Channel] = []
        self.balancer = balancer_pb2_grpc.BalancerStub(self._open(cfg.balancer_address))
        self.balancer_health = health_pb2_grpc.HealthStub(self._open(cfg.balancer_address))
        self.monitor = monitor_pb2_grpc.MonitorStub(self._open(cfg.monitor_address)) if cfg.monitor_address else None
        self._models: frozenset[str] = frozenset()
        self._models_read_s = -float("inf")
        self._engines: dict[str, engine_pb2_grpc.EngineStub] = {}
        self.model_servers = Http1Client(read_timeout_s=None, connect_timeout_s=10.0, max_idle_per_origin=256
                                         ) if cfg.direct and cfg.stream_from_model_server else None
        """The client calls stream from an engine's model server with (``Engine.Hold``)."""
        self.model_server_less: set[str] = set()
        """Engines with no model server, or one this gateway cannot reach: streamed from themselves."""
        self.responses = ResponseStore(cfg.responses_store_max, cfg.responses_store_ttl_s,
                                       cfg.responses_store_max_chars)
        """The Responses API's stored responses (``store: true``)."""
        self.in_flight = 0
        """Calls between their request's arrival and their response's end (``max_in_flight``)."""
        self._decision_streams: dict[tuple[tuple[str, str], ...], DecisionStream] = {}
        """One stream of decisions per caller's metadata (its tenant's key, checked by the balancer once
        per stream): the direct path's decisions (``Balancer.DecideStream``)."""

    def enter(self) -> None:
        """Count a call in, or refuse it (429 with ``Retry-After``) past ``max_in_flight``: before its body
        is read, so an overloaded gateway spends nothing more on a call it turns away."""
        if self.cfg.max_in_flight and self.in_flight >= self.cfg.max_in_flight:
            raise OpenAIError(429, f"the gateway carries {self.in_flight} calls; its limit is {self.cfg.max_in_flight}",
                              "rate_limit_error", None, "overloaded", self.cfg.overload_retry_after_s)
        self.in_flight += 1

    def leave(self) -> None:
        self.in_flight -= 1

    def _open(self, address: str) -> grpc.aio.Channel:
        channel = open_channel(address, self.cfg.serve.security)
        self._channels.append(channel)
        return channel

    def engine_at(self, address: str) -> engine_pb2_grpc.EngineStub:
        stub = self._engines.get(address)
        if stub is None:
            stub = self._engines[address] = engine_pb2_grpc.EngineStub(self._open(address))
        return stub

    def decisions(self, metadata: tuple[tuple[str, str], ...]) -> DecisionStream:
        """The stream of decisions for callers of this metadata (the keys are the stack's configured ones)."""
        stream = self._decision_streams.get(metadata)
        if stream is None:
            stream = self._decision_streams[metadata] = DecisionStream(self.balancer, metadata)
        return stream

    def call(self, request: balancer_pb2.GenerateRequest, metadata: tuple[tuple[str, str], ...]) -> Any:
        """One call's stream: decided by the balancer on the caller's stream of decisions and streamed from
        its engine (``cfg.direct``), or relayed by the balancer. Either reads chunk by chunk and cancels."""
        if self.cfg.direct:
            return DirectCall(self.balancer, self.engine_at, request, metadata=metadata,
                              model_server=self.model_servers, model_server_less=self.model_server_less,
                              decisions=self.decisions(metadata))
        return self.balancer.Generate(request, metadata=metadata or None)

    async def close(self) -> None:
        for stream in self._decision_streams.values():
            await stream.close()
        for channel in self._channels:
            await channel.close()
        if self.model_servers is not None:
            await self.model_servers.aclose()

    async def served_models(self) -> frozenset[str]:
        """The models healthy engines serve, as the monitor sees them (cached ``models_cache_s``)."""
        if self.monitor is None:
            raise OpenAIError(503, "the gateway has no monitor_address to read served models from",
                              "service_unavailable")
        now_s = time.monotonic()
        if now_s - self._models_read_s > self.cfg.models_cache_s:
            try:
                snapshot = await self.monitor.Snapshot(monitor_pb2.SnapshotRequest(),
                                                       timeout=self.cfg.dependency_timeout_s)
            except grpc.aio.AioRpcError as exc:
                raise from_grpc(exc) from exc
            self._models = frozenset(e.status.model for e in snapshot.engines if e.healthy)
            self._models_read_s = now_s
        return self._models


class ClientLeft(Exception):
    """The client closed the connection before its request body was whole: nobody is left to answer."""


async def _body(request: Request, limit_bytes: int, timeout_s: float) -> Any:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit_bytes:
        raise OpenAIError(413, f"the request body is {declared} bytes; the limit is {limit_bytes}",
                          "invalid_request_error", None, "request_too_large")
    raw = bytearray()
    try:
        async with asyncio.timeout(timeout_s):
            async for part in request.stream():
                raw += part
                if len(raw) > limit_bytes:
                    raise OpenAIError(413, f"the request body exceeds {limit_bytes} bytes", "invalid_request_error",
                                      None, "request_too_large")
    except TimeoutError:
        raise OpenAIError(408, f"the request body was not whole within {timeout_s:g}s", "invalid_request_error",
                          None, "request_timeout") from None
    except ClientDisconnect:
        raise ClientLeft() from None
    try:
        return json.loads(raw, parse_constant=_no_constant, parse_float=_finite)
    except (ValueError, RecursionError) as exc:   # ValueError: JSON's errors, and an integer past 4,300 digits
        raise invalid(f"the request body is not valid JSON: {exc}") from exc


def _no_constant(name: str) -> Any:
    """NaN and Infinity, which Python's JSON reader takes and JSON has not: the body is invalid."""
    raise ValueError(f"{name} is not a JSON value")


def _finite(text: str) -> float:
    """A JSON number past a float's range (``1e400``) is read as infinity: invalid as NaN is, since a reply
    or a stored response echoing it could not be written as JSON."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is past a float's range")
    return value


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own errors (an unknown route 404, a method the route does not take 405), OpenAI-shaped."""
    assert isinstance(exc, HTTPException)
    kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
    response = _error_response(OpenAIError(exc.status_code, f"{request.method} {request.url.path}: {exc.detail}",
                                           kind, None, None))
    response.headers.update(exc.headers or {})   # a 405's Allow
    return response


async def _internal_error(request: Request, exc: Exception) -> Response:
    """An error no handler answered: OpenAI's 500 (its cause in the gateway's log, not the reply)."""
    log.exception("unhandled_request_error", path=request.url.path)
    return _error_response(OpenAIError(500, "the gateway failed to answer the request", "internal_error", None, None))


def _error_response(error: OpenAIError) -> JSONResponse:
    REQUEST_FAILURE.labels(str(error.status_code)).inc()
    return AsciiJSONResponse(error.body(), status_code=error.status_code, headers=error.headers())


class AsciiJSONResponse(JSONResponse):
    """JSON with every non-ASCII character escaped, as the streamed replies write it (``json.dumps``):
    Starlette's writes UTF-8 and fails on a lone surrogate a client sent (an unknown field's name echoed
    in an error, a stored response's metadata), which would turn a 400 or a stored response into a 500."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, allow_nan=False, separators=(",", ":")).encode()


def _caller(request: Request, cfg: GatewayConfig) -> tuple[str, str]:
    """The caller's API key and its tenant, checked here when the stack has keys; the key is passed on to
    the balancer (which checks it again and takes the tenant from it). On a stack without keys both are
    "" whatever the caller sends: OpenAI's clients always send one (``Bearer EMPTY``), which the balancer
    of a stack secured by certificates or its service token would refuse as no key of its own, and each
    distinct one would open a stream of decisions of its own (``Gateway.decisions``)."""
    if not cfg.serve.security.api_keys:
        return "", ""
    key = bearer({"authorization": request.headers.get("authorization", "")})
    if not key:
        raise OpenAIError(401, "an API key is required: Authorization: Bearer <key>", "authentication_error",
                          None, "invalid_api_key")
    try:
        return key, tenant_of_key(key, cfg.serve.security.api_keys)
    except Unauthenticated as exc:
        raise OpenAIError(401, str(exc), "authentication_error", None, "invalid_api_key") from exc


def _passed_on(api_key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {api_key}"),) if api_key else ()


Prepare = Callable[[Gateway, Any, str], Awaitable[tuple[ParsedRequest, Reply | None]]]
"""A request's parsing for its API: the call, and the reply's shapes (None: Chat Completions')."""


async def _answer(request: Request, prepare: Prepare) -> Any:
    """One call's response: the caller checked, the body read and parsed by ``prepare`` (given the gateway,
    the body and the caller's tenant), or an OpenAI-shaped error."""
    received_s = time.perf_counter()
    gateway: Gateway = request.app.state.gateway
    try:
        gateway.enter()
    except OpenAIError as error:
        return _error_response(error)
    try:
        api_key, tenant = _caller(request, gateway.cfg)
        body = await _body(request, gateway.cfg.max_body_bytes, gateway.cfg.body_timeout_s)
        parsed, reply = await prepare(gateway, body, tenant)
    except OpenAIError as error:
        gateway.leave()
        return _error_response(error)
    except ClientLeft:
        gateway.leave()
        REQUEST_FAILURE.labels(str(CLIENT_CLOSED_REQUEST)).inc()
        return Response(status_code=CLIENT_CLOSED_REQUEST)   # not sent: the connection is gone
    except BaseException:
        gateway.leave()
        raise
    return CallResponse(gateway.call, parsed, received_s, _passed_on(api_key), reply, on_end=gateway.leave)


async def _completion(request: Request, kind: str) -> Any:
    async def prepare(gateway: Gateway, body: Any, tenant: str) -> tuple[ParsedRequest, Reply | None]:
        cfg = gateway.cfg
        if isinstance(body, dict):
            refuse_what_the_engines_cannot_give(body)
        return parse(kind, body, request.headers, cfg.default_max_tokens, cfg.router_model,
                     await _served_for(gateway, body)), None
    return await _answer(request, prepare)


async def _served_for(gateway: Gateway, body: Any) -> frozenset[str]:
    """The served models, read only when the request names a model other than the router's."""
    model = body.get("model") if isinstance(body, dict) else None
    return await gateway.served_models() if model and model != gateway.cfg.router_model else frozenset()


def _previous(gateway: Gateway, body: Any, tenant: str) -> StoredResponse | None:
    """The stored response a request's ``previous_response_id`` names; 404 when there is none (or it is
    another tenant's, or expired)."""
    previous_id = body.get("previous_response_id") if isinstance(body, dict) else None
    if previous_id is None:
        return None
    if not isinstance(previous_id, str) or not previous_id:
        raise invalid("previous_response_id must be a response id", "previous_response_id")
    stored = gateway.responses.get(previous_id, tenant, time.time())
    if stored is None:
        raise OpenAIError(404, f"Response with id {previous_id!r} not found (never stored, expired, or stored "
                          "by another gateway)", "invalid_request_error", "previous_response_id",
                          "previous_response_not_found")
    return stored


async def create_response(request: Request) -> Any:
    """``POST /v1/responses``: one call, its conversation continued from ``previous_response_id``."""
    async def prepare(gateway: Gateway, body: Any, tenant: str) -> tuple[ParsedRequest, Reply | None]:
        cfg, previous = gateway.cfg, _previous(gateway, body, tenant)
        parsed = parse_responses(body, request.headers, cfg.default_max_tokens, cfg.router_model,
                                 await _served_for(gateway, body), previous.conversation if previous else None)
        return parsed, ResponsesReply(parsed, body, tenant, gateway.responses.put)
    return await _answer(request, prepare)


async def retrieve_response(request: Request) -> Response:
    """``GET /v1/responses/{response_id}``: a stored response, as it was returned."""
    gateway: Gateway = request.app.state.gateway
    try:
        _, tenant = _caller(request, gateway.cfg)
        response_id = request.path_params["response_id"]
        stored = gateway.responses.get(response_id, tenant, time.time())
        if stored is None:
            raise OpenAIError(404, f"Response with id {response_id!r} not found", "invalid_request_error",
                              "response_id", "response_not_found")
    except OpenAIError as error:
        return _error_response(error)
    return AsciiJSONResponse(stored.body)


async def chat_completions(request: Request) -> Any:
    return await _completion(request, "chat")


async def completions(request: Request) -> Any:
    return await _completion(request, "completion")


async def models(request: Request) -> Response:
    gateway: Gateway = request.app.state.gateway
    try:
        _caller(request, gateway.cfg)
        served = await gateway.served_models()
    except OpenAIError as error:
        return _error_response(error)
    created = int(time.time())
    data = [{"id": name, "object": "model", "created": created, "owned_by": "hetflow", "root": name}
            for name in (gateway.cfg.router_model, *sorted(served))]
    return AsciiJSONResponse({"object": "list", "data": data})


async def health(request: Request) -> Response:
    """200 when the balancer answers SERVING (compose and Kubernetes probe this)."""
    gateway: Gateway = request.app.state.gateway
    try:
        reply = await gateway.balancer_health.Check(health_pb2.HealthCheckRequest(),
                                                    timeout=gateway.cfg.dependency_timeout_s)
        serving = reply.status == health_pb2.HealthCheckResponse.SERVING
    except grpc.aio.AioRpcError:
        serving = False
    return Response(status_code=200 if serving else 503)


async def metrics(request: Request) -> Response:
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


def build(cfg: GatewayConfig) -> Starlette:
    """The ASGI app; the gRPC channels open with its lifespan, on the server's event loop."""
    if not cfg.balancer_address:
        raise ValueError("gateway.balancer_address is required (or a balancer section with a port)")

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        app.state.gateway = Gateway(cfg)
        try:
            yield
        finally:
            await app.state.gateway.close()

    return Starlette(exception_handlers={HTTPException: _http_error, Exception: _internal_error}, routes=[
        Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/v1/responses", create_response, methods=["POST"]),
        Route("/v1/responses/{response_id}", retrieve_response, methods=["GET"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
    ], lifespan=lifespan)
