"""hetflow as a standard endpoint picker (issue 34): the Gateway API Inference Extension's endpoint-picker
protocol, v1.0.0 (2025-07-29; kubernetes-sigs/gateway-api-inference-extension,
docs/proposals/004-endpoint-picker-protocol), over Envoy's ``ExternalProcessor`` (the ``xds-protos``
package's ``envoy.service.ext_proc.v3``).

Behind any conformant gateway, one InferencePool (one model): the proxy streams each HTTP request's
headers and body here (``FULL_DUPLEX_STREAMED`` body mode, which the protocol requires); the balancer
decides the engine and the priority as for any call, admits it in the monitor, and answers with the
request's headers (``x-gateway-destination-endpoint: <ip:port>`` of the engine's model server, the
body's new length) and its body, into which vLLM's request ``priority`` is written; the destination also
goes in ``dynamic_metadata["envoy.lb"]``. The response streams back through here unchanged; its end
releases the monitor's entry (``Complete`` at the end of the body, ``Cancel`` if the stream ends first).
Model choice stays at hetflow's own front door: the pool's model is the call's.

Protocol rules kept (the proposal's sections):
- Endpoint subset: ``metadata_context.filter_metadata["envoy.lb.subset_hint"]
  ["x-gateway-destination-endpoint-subset"]`` limits the choice; none eligible is an immediate 503.
- Destination endpoint: header and metadata carry the same single ``ip:port``; no endpoint ready is an
  immediate 503; a call to drop (hetflow's RESOURCE_EXHAUSTED: a tenant's limit, no KV room in time, the
  hold queue full) an immediate 429; a body that is no valid OpenAI request an immediate 400.
- A request without a body (headers with end of stream) goes to the least loaded ready endpoint.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from typing import Any, AsyncIterator

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ext_proc_grpc
from envoy.type.v3 import http_status_pb2
from google.protobuf import struct_pb2

from balancer_svc import convert
from balancer_svc.dispatcher import Dispatch, Dispatcher
from hetflow.core.errors import HetflowError, InvalidArgument
from hetflow.runtime.interceptors import status_of
from hetflow.runtime.logs import get_logger
from hetflow.runtime.openai_request import OpenAIError, from_status, parse
from hetflow.runtime.security import Caller, PermissionDenied, Unauthenticated, bearer, tenant_of_key

log = get_logger(__name__)
EXT_PROC_SERVICE_NAME = ext_proc.DESCRIPTOR.services_by_name["ExternalProcessor"].full_name
DESTINATION = "x-gateway-destination-endpoint"
SUBSET_NAMESPACE, SUBSET_KEY = "envoy.lb.subset_hint", "x-gateway-destination-endpoint-subset"
METADATA_NAMESPACE = "envoy.lb"
DEFAULT_MAX_TOKENS = 1024
"""max_tokens of a request that sets none, as the gateway's default."""


@dataclass
class Exchange:
    """One HTTP request's ext_proc stream: the headers held until the body is whole, then the decision,
    then the response passing through to its end."""

    headers: dict[str, str] = field(default_factory=dict)
    body: bytearray = field(default_factory=bytearray)
    subset: frozenset[str] | None = None
    dispatch: Dispatch | None = None
    request_id: str = ""
    output_tokens: int = 0
    ended: bool = False


class EndpointPicker(ext_proc_grpc.ExternalProcessorServicer):
    def __init__(self, dispatcher: Dispatcher, pool_model: str) -> None:
        self.dispatcher, self.pool_model = dispatcher, pool_model

    async def Process(self, request_iterator: AsyncIterator[ext_proc.ProcessingRequest],
                      context: grpc.aio.ServicerContext) -> AsyncIterator[ext_proc.ProcessingResponse]:
        exchange = Exchange()
        try:
            async for message in request_iterator:
                for reply in await self._on(exchange, message):
                    yield reply
        finally:
            self._end(exchange, completed=False)

    async def _on(self, exchange: Exchange, message: ext_proc.ProcessingRequest) -> list[ext_proc.ProcessingResponse]:
        kind = message.WhichOneof("request")
        if kind == "request_headers":
            exchange.headers = _headers(message.request_headers.headers)
            exchange.subset = _subset(message.metadata_context)
            if message.request_headers.end_of_stream:
                return [await self._bodiless(exchange)]
            return []  # answered with the body, once it is whole (the destination header needs the decision)
        if kind == "request_body":
            exchange.body += message.request_body.body
            if not message.request_body.end_of_stream:
                return []
            return await self._decided(exchange)
        if kind == "response_headers":
            return [ext_proc.ProcessingResponse(response_headers=ext_proc.HeadersResponse())]
        if kind == "response_body":
            chunk = message.response_body
            exchange.output_tokens = max(exchange.output_tokens, _usage_tokens(chunk.body))
            if chunk.end_of_stream:
                self._end(exchange, completed=True)
            return [_streamed(chunk.body, chunk.end_of_stream, response=True)]
        if kind == "response_trailers":
            self._end(exchange, completed=True)
            return [ext_proc.ProcessingResponse(response_trailers=ext_proc.TrailersResponse())]
        if kind == "request_trailers":
            return [ext_proc.ProcessingResponse(request_trailers=ext_proc.TrailersResponse())]
        raise InvalidArgument(f"unexpected ext_proc message {kind!r}")

    async def _decided(self, exchange: Exchange) -> list[ext_proc.ProcessingResponse]:
        """Decide the call: the headers (destination, length) and the body with vLLM's priority, or an
        immediate response."""
        d = self.dispatcher
        body = _json(exchange.body)
        try:
            tenant = self._tenant(exchange.headers)
            parsed = parse("chat" if isinstance(body, dict) and "messages" in body else "completion", body,
                           exchange.headers, DEFAULT_MAX_TOKENS, self.pool_model, frozenset({self.pool_model}))
        except OpenAIError as exc:
            return [_immediate(exc)]
        try:
            call = convert.call_from_proto(parsed.request, d.cfg.max_tokens_limit, time.time(), d.cfg.past_deadline,
                                           count_prompt=d.count_prompt)
            call = replace(call, model_pin=self.pool_model)
            if tenant:
                call = convert.scoped_to_caller(call, Caller("tenant", tenant))
            d.gateway_calls.add(call.request_id)  # read as the call is placed, in every round it is held
            try:
                with d.admission(call.workflow.tenant, relays=False):
                    d.monitor_view.limit_endpoints(call.request_id, exchange.subset)
                    try:
                        dispatch = await d.decide(call)
                    finally:
                        d.monitor_view.limit_endpoints(call.request_id, None)
            finally:
                d.gateway_calls.discard(call.request_id)
        except (HetflowError, PermissionDenied) as exc:  # as the gateway answers them (the protocol: 429 to
            # drop, 503 with no endpoint ready)
            code, message = status_of(exc)
            return [_immediate(from_status(code, message, getattr(exc, "retry_after_s", None)))]
        endpoint = d.monitor_view.engine_status(dispatch.engine.engine_id).serving_endpoint
        if not endpoint:
            self._release(call.request_id, 0, "cancelled", dispatch)
            return [_immediate(from_status(grpc.StatusCode.UNAVAILABLE,
                                           f"engine {dispatch.engine.engine_id} reports no model-server endpoint"))]
        exchange.dispatch, exchange.request_id = dispatch, call.request_id
        d.sent(dispatch)
        body["priority"] = round(dispatch.priority.key)  # vLLM's --scheduling-policy priority: lower runs first
        raw = json.dumps(body).encode("utf-8")
        headers = ext_proc.ProcessingResponse(
            request_headers=ext_proc.HeadersResponse(response=ext_proc.CommonResponse(
                clear_route_cache=True, header_mutation=ext_proc.HeaderMutation(set_headers=[
                    _header(DESTINATION, endpoint), _header("content-length", str(len(raw))),
                    _header("x-hetflow-request-id", call.request_id)]))),
            dynamic_metadata=_destination_metadata(endpoint))
        return [headers, _streamed(raw, True, response=False)]

    async def _bodiless(self, exchange: Exchange) -> ext_proc.ProcessingResponse:
        """A request with no body (``GET /v1/models``): the least loaded ready endpoint, nothing admitted."""
        endpoint = self.dispatcher.monitor_view.least_loaded_endpoint(self.pool_model, exchange.subset)
        if not endpoint:
            return _immediate(from_status(grpc.StatusCode.UNAVAILABLE, f"no ready endpoint serves {self.pool_model}"))
        return ext_proc.ProcessingResponse(
            request_headers=ext_proc.HeadersResponse(response=ext_proc.CommonResponse(
                clear_route_cache=True, header_mutation=ext_proc.HeaderMutation(
                    set_headers=[_header(DESTINATION, endpoint)]))),
            dynamic_metadata=_destination_metadata(endpoint))

    def _tenant(self, headers: dict[str, str]) -> str:
        """The tenant the HTTP request's API key names, when the stack checks keys ("" otherwise)."""
        api_keys = self.dispatcher.cfg.serve.security.api_keys
        if not api_keys:
            return ""
        try:
            return tenant_of_key(bearer(headers), api_keys)
        except Unauthenticated as exc:
            raise OpenAIError(401, f"{exc}: Authorization: Bearer <key>", "authentication_error") from exc

    def _end(self, exchange: Exchange, completed: bool) -> None:
        if exchange.dispatch is None or exchange.ended:
            return
        exchange.ended = True
        self._release(exchange.request_id, exchange.output_tokens, "completed" if completed else "cancelled",
                      exchange.dispatch)

    def _release(self, request_id: str, output_tokens: int, outcome: str, dispatch: Dispatch) -> None:
        self.dispatcher.monitor_view.release_later(request_id, output_tokens, outcome, admitted=dispatch.admitted)


def _json(body: bytearray) -> Any:
    try:
        return json.loads(bytes(body))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None


def _headers(headers: base_pb2.HeaderMap) -> dict[str, str]:
    """Header names lower-cased; Envoy sends values as ``raw_value`` bytes (or ``value``)."""
    return {h.key.lower(): h.raw_value.decode("utf-8", "replace") if h.raw_value else h.value for h in headers.headers}


def _subset(metadata: base_pb2.Metadata) -> frozenset[str] | None:
    namespace = metadata.filter_metadata.get(SUBSET_NAMESPACE)
    if namespace is None or SUBSET_KEY not in namespace.fields:
        return None
    return frozenset(v.string_value for v in namespace.fields[SUBSET_KEY].list_value.values)


def _header(key: str, value: str) -> base_pb2.HeaderValueOption:
    return base_pb2.HeaderValueOption(header=base_pb2.HeaderValue(key=key, raw_value=value.encode("utf-8")),
                                      append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD)


def _destination_metadata(endpoint: str) -> struct_pb2.Struct:
    metadata = struct_pb2.Struct()
    metadata.update({METADATA_NAMESPACE: {DESTINATION: endpoint}})
    return metadata


def _streamed(body: bytes, end_of_stream: bool, response: bool) -> ext_proc.ProcessingResponse:
    mutation = ext_proc.BodyResponse(response=ext_proc.CommonResponse(body_mutation=ext_proc.BodyMutation(
        streamed_response=ext_proc.StreamedBodyResponse(body=body, end_of_stream=end_of_stream))))
    return (ext_proc.ProcessingResponse(response_body=mutation) if response
            else ext_proc.ProcessingResponse(request_body=mutation))


def _immediate(error: OpenAIError) -> ext_proc.ProcessingResponse:
    """The gateway answers the client itself: the error's status, OpenAI-shaped body and ``Retry-After``."""
    return ext_proc.ProcessingResponse(immediate_response=ext_proc.ImmediateResponse(
        status=http_status_pb2.HttpStatus(code=error.status_code), body=json.dumps(error.body()).encode("utf-8"),
        headers=ext_proc.HeaderMutation(set_headers=[_header(k, v) for k, v in error.headers().items()]),
        details=error.message[:200]))


def _usage_tokens(chunk: bytes) -> int:
    """Completion tokens from an OpenAI ``usage`` object in a response chunk (the last SSE event with
    ``stream_options.include_usage``, or a whole reply), else 0."""
    marker = chunk.rfind(b'"completion_tokens"')
    if marker < 0:
        return 0
    digits = chunk[marker + len(b'"completion_tokens"'):].lstrip(b": \t")
    number = digits[:len(digits) - len(digits.lstrip(b"0123456789"))]
    return int(number) if number else 0
