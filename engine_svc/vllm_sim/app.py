"""The vLLM-compatible simulated server: vLLM 0.32's OpenAI routes over the real-time engine model.

Routes as ``vllm serve`` 0.32 registers them for a generate model with default flags (its
``entrypoints/launchers/api_server/routers.py``): ``POST /v1/completions`` and ``/v1/chat/completions``
(whole, or streamed as SSE with ``stream_options.include_usage`` and ``continuous_usage_stats``),
``GET /v1/models``, ``/health`` and ``/ping`` (200, empty), ``/version``, ``/load``, ``/kv_event_sources``
(``{}``: no KV events), ``POST /tokenize`` and ``/detokenize``, ``GET /metrics``. The scale-out render
routes answer 403 as vLLM's do without ``--enable-scale-out``, so a router that asks for them falls back
as it would in front of real vLLM; with ``enable_scale_out`` the chat and completion render routes answer
with the request's token ids, as vLLM's do (the rest of scale-out answers 501). Nothing vLLM lacks is
served.

Thin handlers: checks and shapes are ``protocol``'s, the engine is ``SimBackend``'s, metrics are
``metrics``'. A client that disconnects mid-stream aborts its request: the engine frees its blocks.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import time
from contextlib import asynccontextmanager
from typing import Any, AsyncGenerator, AsyncIterator, cast

from jinja2 import TemplateError
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from engine_svc.backends.base import GenerateCall, OutputDelta
from engine_svc.backends.sim import EngineClock, SimBackend, simulated_output_tokens
from engine_svc.vllm_sim import protocol
from engine_svc.vllm_sim.config import VllmSimConfig
from engine_svc.vllm_sim.metrics import VllmSimMetrics
from engine_svc.vllm_sim.protocol import GenerateRequest, VllmHttpError
from engine_svc.vllm_sim.tokenizer import PromptTokenizer
from hetflow.core.call import SamplingSpec
from hetflow.core.engine.aging_queue import AgingPriorityQueue
from hetflow.core.engine.profile import load_profile
from hetflow.core.errors import InvalidArgument

DISCONNECT_POLL_S = 0.5
"""How often a whole (non-streamed) request checks that its client is still there."""
NO_AGING_ITERATIONS = 2**62
"""vLLM's queues do not age: ``fcfs`` serves by arrival (every priority 0 here), ``priority`` by
(priority, arrival), with no promotion of a request that waits."""


class VllmSimServer:
    """One simulated engine and what its routes share."""

    def __init__(self, cfg: VllmSimConfig, tokenizer: PromptTokenizer | None = None,
                 clock: EngineClock | None = None) -> None:
        """``tokenizer``: the configured one when not given (loaded after the profile is checked)."""
        profile = load_profile(cfg.profile)
        if profile.kv_capacity_tokens < profile.max_model_len:  # vLLM refuses to start so (it could not hold
            raise ValueError(  # one request of the whole context); every request then fits the engine
                f"profile {profile.name}: max_model_len {profile.max_model_len} tokens is more than its KV cache "
                f"holds ({profile.kv_capacity_tokens} tokens)")
        self.cfg, self.profile = cfg, profile
        self.tokenizer = tokenizer or PromptTokenizer(cfg.tokenizer)
        self.model_name = cfg.served_model_name or profile.model
        self.served = (self.model_name,)
        self.metrics = VllmSimMetrics(self.model_name, profile.max_model_len)
        queue = AgingPriorityQueue(starvation_threshold=NO_AGING_ITERATIONS)
        self.backend = SimBackend(self.model_name, profile, queue, cfg.output_median_tokens, clock,
                                  cfg.time_scale, on_step=self.metrics.observe_step)
        self.metrics.watch(self.backend.scheduler)
        self.fingerprint = "vllm-" + protocol.VLLM_VERSION + "-" + hashlib.blake2b(
            json.dumps([str(cfg.profile), self.model_name, cfg.time_scale]).encode(), digest_size=4).hexdigest()
        self._engine_ids = itertools.count()

    def check(self, body: dict[str, Any], headers: Any, chat: bool) -> tuple[GenerateRequest, int]:
        """The request as the engine will run it, and its output length (``max_tokens`` with ``ignore_eos``;
        else drawn, at least ``min_tokens``). A prompt the tokenizer or the chat template refuses is 400
        ``BadRequestError``, as vLLM maps ValueError, TypeError and jinja's TemplateError."""
        try:
            return self._check(body, headers, chat)
        except (ValueError, TypeError, TemplateError, InvalidArgument) as exc:
            raise protocol.bad_request(str(exc)) from exc

    def _check(self, body: dict[str, Any], headers: Any, chat: bool) -> tuple[GenerateRequest, int]:
        model = protocol.served_model(body, self.served)
        common = protocol.common_fields(body)
        if chat:
            ids = self.tokenizer.chat(protocol.chat_messages(body), bool(body.get("add_generation_prompt", True)))
            requested, name = protocol.chat_max_tokens(body)
            text_prompt = True
        else:
            prompt = protocol.completion_prompt(body)
            text_prompt = isinstance(prompt, str)
            if isinstance(prompt, str):
                ids = self.tokenizer.encode(prompt, bool(body.get("add_special_tokens", True)))
            else:
                ids = prompt
                if max(ids) >= self.tokenizer.vocab_size:
                    raise protocol.bad_request(f"Token id {max(ids)} is out of vocabulary")
            requested, name = protocol.completion_max_tokens(body), "max_tokens"
        max_tokens = protocol.max_tokens_for(requested, len(ids), self.profile.max_model_len, text_prompt, name)
        if common["min_tokens"] > max_tokens:
            raise protocol.bad_request(f"min_tokens must be less than or equal to max_tokens={max_tokens}, "
                                       f"got {common['min_tokens']}.", "min_tokens", common["min_tokens"])
        header_priority = headers.get("x-vllm-priority")
        if header_priority is not None and header_priority.lstrip("-").isdigit():
            common["priority"] = int(header_priority)
        req = GenerateRequest(chat=chat, request_id=protocol.request_id_of(body, headers.get("x-request-id"), chat),
                              model=model, prompt_token_ids=ids, max_tokens=max_tokens, **common)
        drawn = simulated_output_tokens(req.request_id, self.cfg.output_median_tokens)
        output_tokens = max_tokens if req.ignore_eos else min(max_tokens, max(req.min_tokens, drawn))
        return req, output_tokens

    def engine_call(self, req: GenerateRequest, output_tokens: int) -> GenerateCall:
        """The engine's call: its output fixed as filler tokens seeded by the request id, so a next call that
        sends the text back finds its blocks cached, as it would on vLLM."""
        priority = req.priority if self.cfg.scheduling_policy == "priority" else 0
        return GenerateCall(f"{req.request_id}-{next(self._engine_ids)}", "", (),
                            SamplingSpec(max_tokens=req.max_tokens, ignore_eos=req.ignore_eos), float(priority),
                            prompt_token_ids=req.prompt_token_ids,
                            output_token_ids=self.tokenizer.filler(req.request_id, output_tokens))

    async def run(self, req: GenerateRequest, call: GenerateCall) -> AsyncIterator[OutputDelta]:
        """The engine's deltas with the text of their tokens, metrics observed on the way; closing early
        aborts the request."""
        clock, arrived_s = self.backend.clock, self.backend.clock.now()
        last_s, tokens, queued_s = arrived_s, 0, 0.0
        stream = cast(AsyncGenerator[OutputDelta, None], self.backend.generate(call))
        try:
            async for delta in stream:
                now_s = clock.now()
                new_tokens = delta.output_tokens - tokens
                if new_tokens > 0:
                    self.metrics.observe_tokens(new_tokens, now_s - last_s, tokens == 0, len(req.prompt_token_ids))
                delta.text = self.tokenizer.decode(call.output_token_ids[tokens:delta.output_tokens])
                tokens, last_s, queued_s = delta.output_tokens, now_s, queued_s + delta.queued_s
                if delta.finished:
                    self.metrics.observe_finished(len(req.prompt_token_ids), tokens, delta.finish_reason, queued_s,
                                                  now_s - arrived_s)
                yield delta
        finally:
            await stream.aclose()  # a client that left: the engine aborts it (vLLM counts no success for it)


def _error(exc: VllmHttpError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


async def _body(request: Request) -> dict[str, Any]:
    return protocol.parse_json_body(await request.body(), request.headers.get("content-type", ""))


def _generate_route(server: VllmSimServer, chat: bool) -> Any:
    async def handle(request: Request) -> Response:
        try:
            req, output_tokens = server.check(await _body(request), request.headers, chat)
        except VllmHttpError as exc:
            return _error(exc)
        call = server.engine_call(req, output_tokens)
        created = int(time.time())
        if req.stream:
            return StreamingResponse(_sse(server, req, call, created), media_type="text/event-stream")
        whole = asyncio.ensure_future(_whole(server, req, call, created))
        while not whole.done():  # vLLM's with_cancellation: a client that leaves aborts its request
            await asyncio.wait({whole}, timeout=DISCONNECT_POLL_S)
            if not whole.done() and await request.is_disconnected():
                whole.cancel()
                return Response(status_code=499)
        try:
            return JSONResponse(whole.result())
        except Exception as exc:  # noqa: BLE001 - vLLM's catch-all: 500 InternalServerError, nothing leaks
            return _error(_engine_error(exc))
    return handle


async def _whole(server: VllmSimServer, req: GenerateRequest, call: GenerateCall, created: int) -> dict[str, Any]:
    text, finish_reason, completion_tokens = [], "", 0
    async for delta in server.run(req, call):
        text.append(delta.text)
        finish_reason, completion_tokens = delta.finish_reason, delta.output_tokens
    return protocol.whole_response(req, created, "".join(text), finish_reason, len(req.prompt_token_ids),
                                   completion_tokens, server.fingerprint)


def _engine_error(exc: Exception) -> VllmHttpError:
    """An error the engine raised after the checks: 500 ``InternalServerError`` (vLLM's catch-all)."""
    return VllmHttpError(500, "InternalServerError", f"{type(exc).__name__}: {exc}")


async def _sse(server: VllmSimServer, req: GenerateRequest, call: GenerateCall, created: int) -> AsyncIterator[bytes]:
    prompt_tokens = len(req.prompt_token_ids)

    def running(completion_tokens: int) -> dict[str, Any] | None:
        return protocol.usage(prompt_tokens, completion_tokens) if req.continuous_usage else None

    role_due = req.chat   # vLLM sends a chat's role with the engine's first output, not on acceptance
    completion_tokens = 0
    try:
        async for delta in server.run(req, call):
            if role_due:
                role_due = False
                yield protocol.sse(protocol.stream_chunk(req, created, "", None, running(0), role=True))
            completion_tokens = delta.output_tokens
            finish = delta.finish_reason if delta.finished else None
            fingerprint = server.fingerprint if delta.finished and not req.include_usage else None
            yield protocol.sse(protocol.stream_chunk(req, created, delta.text, finish, running(completion_tokens),
                                                     fingerprint))
    except Exception as exc:  # noqa: BLE001 - after the 200, vLLM sends the error as a chunk, then [DONE]
        yield protocol.sse(_engine_error(exc).body())
        yield protocol.sse("[DONE]")
        return
    if req.include_usage:
        yield protocol.sse(protocol.usage_chunk(req, created, prompt_tokens, completion_tokens, server.fingerprint))
    yield protocol.sse("[DONE]")


def _models(server: VllmSimServer) -> Any:
    async def handle(request: Request) -> Response:
        now = int(time.time())
        permission = {"id": "modelperm-" + hashlib.blake2b(str(now).encode(), digest_size=8).hexdigest(),
                      "object": "model_permission", "created": now, "allow_create_engine": False,
                      "allow_sampling": True, "allow_logprobs": True, "allow_search_indices": False,
                      "allow_view": True, "allow_fine_tuning": False, "organization": "*", "group": None,
                      "is_blocking": False}
        cards = [{"id": name, "object": "model", "created": now, "owned_by": "vllm", "root": server.model_name,
                  "parent": None, "max_model_len": server.profile.max_model_len, "permission": [permission]}
                 for name in server.served]
        return JSONResponse({"object": "list", "data": cards})
    return handle


def _tokenize(server: VllmSimServer) -> Any:
    async def handle(request: Request) -> Response:
        try:
            body = await _body(request)
            if body.get("model") is not None:
                protocol.served_model(body, server.served)
            if "messages" in body:
                ids = server.tokenizer.chat(protocol.chat_messages(body), bool(body.get("add_generation_prompt", True)))
            elif isinstance(body.get("prompt"), str):
                ids = server.tokenizer.encode(body["prompt"], bool(body.get("add_special_tokens", True)))
            else:
                raise protocol.invalid_body("missing", "body.prompt", "Field required", body)
        except VllmHttpError as exc:
            return _error(exc)
        strings = server.tokenizer.token_strings(ids) if body.get("return_token_strs") else None
        return JSONResponse({"count": len(ids), "max_model_len": server.profile.max_model_len, "tokens": list(ids),
                             "token_strs": strings})
    return handle


def _detokenize(server: VllmSimServer) -> Any:
    async def handle(request: Request) -> Response:
        try:
            body = await _body(request)
            tokens = body.get("tokens")
            if not isinstance(tokens, list) or not all(isinstance(t, int) and t >= 0 for t in tokens):
                raise protocol.invalid_body("list_type", "body.tokens", "Input should be a list of token ids", tokens)
        except VllmHttpError as exc:
            return _error(exc)
        return JSONResponse({"prompt": server.tokenizer.decode(tokens)})
    return handle


def _metrics(server: VllmSimServer) -> Any:
    async def handle(request: Request) -> Response:
        return Response(generate_latest(server.metrics.registry), media_type=CONTENT_TYPE_LATEST)
    return handle


def _health(server: VllmSimServer) -> Any:
    async def handle(request: Request) -> Response:
        return Response(status_code=200 if server.backend.alive else 503)
    return handle


async def _version(request: Request) -> Response:
    return JSONResponse({"version": protocol.VLLM_VERSION})


async def _load(request: Request) -> Response:
    return JSONResponse({"server_load": 0})


async def _kv_event_sources(request: Request) -> Response:
    return JSONResponse({})


def _render_route(server: VllmSimServer, chat: bool) -> Any:
    async def handle(request: Request) -> Response:
        try:
            req, _ = server.check(await _body(request), request.headers, chat)
        except VllmHttpError as exc:
            return _error(exc)
        return JSONResponse(protocol.rendered(req))
    return handle


async def _scale_out_not_simulated(request: Request) -> Response:
    return _error(VllmHttpError(501, "NotImplementedError", f"hetflow's vllm-sim serves the render routes of "
                                f"scale-out only, not {request.url.path}."))


async def _scale_out_disabled(request: Request) -> Response:
    return _error(VllmHttpError(403, "PermissionDeniedError", "Scale-out endpoints are disabled. Restart vllm serve "
                                "with --enable-scale-out to enable them."))


async def _http_error(request: Request, exc: Exception) -> Response:
    """Unknown paths and methods as FastAPI answers them for vLLM: ``{"detail": ...}``."""
    assert isinstance(exc, HTTPException)
    return JSONResponse({"detail": exc.detail}, status_code=exc.status_code)


SCALE_OUT_ROUTES = ("/v1/chat/completions/render", "/v1/completions/render", "/v1/messages/render",
                    "/v1/responses/render", "/v1/chat/completions/derender", "/v1/completions/derender",
                    "/inference/v1/generate", "/inference/v1/abort_requests")
RENDER_ROUTES = {"/v1/chat/completions/render": True, "/v1/completions/render": False}
"""The render routes vllm-sim serves with ``enable_scale_out``: path -> whether it renders a chat."""


def _scale_out_routes(server: VllmSimServer) -> list[Route]:
    if not server.cfg.enable_scale_out:
        return [Route(path, _scale_out_disabled, methods=["POST"]) for path in SCALE_OUT_ROUTES]
    return [Route(path, _render_route(server, RENDER_ROUTES[path]) if path in RENDER_ROUTES
                  else _scale_out_not_simulated, methods=["POST"]) for path in SCALE_OUT_ROUTES]


def build(cfg: VllmSimConfig, tokenizer: PromptTokenizer | None = None, clock: EngineClock | None = None
          ) -> tuple[VllmSimServer, Starlette]:
    server = VllmSimServer(cfg, tokenizer, clock)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await server.backend.start()
        try:
            yield
        finally:
            await server.backend.close()

    routes = [Route("/v1/completions", _generate_route(server, chat=False), methods=["POST"]),
              Route("/v1/chat/completions", _generate_route(server, chat=True), methods=["POST"]),
              Route("/v1/models", _models(server), methods=["GET"]),
              Route("/tokenize", _tokenize(server), methods=["POST"]),
              Route("/detokenize", _detokenize(server), methods=["POST"]),
              Route("/metrics", _metrics(server), methods=["GET"]),
              Route("/health", _health(server), methods=["GET"]),
              Route("/ping", _health(server), methods=["GET", "POST"]),
              Route("/version", _version, methods=["GET"]),
              Route("/load", _load, methods=["GET"]),
              Route("/kv_event_sources", _kv_event_sources, methods=["GET"]),
              *_scale_out_routes(server)]
    return server, Starlette(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: _http_error})
