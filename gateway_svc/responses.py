"""One OpenAI request as one call's stream (from its engine, or relayed by the balancer), answered over ASGI.

The response is a raw ASGI callable rather than a framework response so that it owns ``receive``:
when the client goes away (mid-stream or still queued) the call is cancelled, and the engine aborts
the request. Errors before the first token answer with their HTTP status;
errors after it are an SSE ``error`` event, as vLLM's server streams them.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Awaitable, Callable, Sequence

import grpc

from gateway_svc import convert
from gateway_svc.metrics import GATEWAY_OVERHEAD_S, REQUEST_FAILURE, RequestTimer
from hetflow.runtime.openai_request import OpenAIError, ParsedRequest, from_grpc
from hetflow.v1 import balancer_pb2

OpenCall = Callable[[balancer_pb2.GenerateRequest, tuple[tuple[str, str], ...]], Any]
"""Starts a call's stream (``Gateway.call``): anything with ``read()`` and ``cancel()``."""

Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]


def _header_pairs(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.encode(), v.encode()) for k, v in headers.items()]


async def send_json(send: Send, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
    payload = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status, "headers": _header_pairs(
        {"content-type": "application/json", "content-length": str(len(payload)), **(headers or {})})})
    await send({"type": "http.response.body", "body": payload})


async def send_error(send: Send, error: OpenAIError) -> None:
    REQUEST_FAILURE.labels(str(error.status_code)).inc()
    await send_json(send, error.status_code, error.body())


def _sse(data: dict[str, Any] | str) -> bytes:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class CallResponse:
    """Runs ``parsed`` as this request's response."""

    def __init__(self, open_call: OpenCall, parsed: ParsedRequest,
                 received_s: float, metadata: Sequence[tuple[str, str]] = ()) -> None:
        """``received_s``: ``time.perf_counter()`` when the request reached the gateway; ``metadata``: the
        caller's API key, passed on."""
        self.open_call, self.parsed, self.received_s = open_call, parsed, received_s
        self.metadata = tuple(metadata)
        self.timer = RequestTimer(received_s)
        self._awaiting_balancer_s = 0.0

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        call = self.open_call(self.parsed.request, self.metadata)
        watcher = asyncio.ensure_future(_until_disconnect(receive))
        watcher.add_done_callback(lambda _: call.cancel())
        try:
            await (self._stream(call, send) if self.parsed.stream else self._whole(call, send))
            GATEWAY_OVERHEAD_S.observe(time.perf_counter() - self.received_s - self._awaiting_balancer_s)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not watcher.done() or (task is not None and task.cancelling()):
                raise  # the server is stopping, not the client leaving
            REQUEST_FAILURE.labels("499").inc()
        finally:
            watcher.cancel()
            call.cancel()  # a no-op once the stream has finished

    async def _read(self, call: Any) -> Any:
        """The call's next chunk, or EOF; the wait is not the gateway's own time."""
        started_s = time.perf_counter()
        try:
            return await call.read()
        finally:
            self._awaiting_balancer_s += time.perf_counter() - started_s

    async def _first(self, call: Any, send: Send) -> balancer_pb2.GenerateChunk | None:
        """The first chunk, or None once the error it raised has been answered."""
        try:
            chunk = await self._read(call)
        except grpc.aio.AioRpcError as exc:
            await send_error(send, from_grpc(exc))
            return None
        if chunk is grpc.aio.EOF:
            await send_error(send, OpenAIError(502, "the balancer ended the call without a reply", "internal_error"))
            return None
        return chunk

    def _extra(self, chunk: balancer_pb2.GenerateChunk) -> dict[str, Any]:
        """The ``hetflow`` field: where the call ran and, when asked, the balancer's receipt."""
        extra: dict[str, Any] = {"engine_id": chunk.engine_id}
        if chunk.HasField("receipt"):
            extra["receipt"] = convert.receipt_json(chunk.receipt)
        return extra

    @staticmethod
    def _headers(chunk: balancer_pb2.GenerateChunk) -> dict[str, str]:
        return {"x-hetflow-model": chunk.model, "x-hetflow-engine-id": chunk.engine_id,
                "x-request-id": chunk.request_id}

    async def _stream(self, call: Any, send: Send) -> None:
        first = await self._first(call, send)
        if first is None:
            return
        await send({"type": "http.response.start", "status": 200, "headers": _header_pairs(
            {"content-type": "text/event-stream", "cache-control": "no-cache", **self._headers(first)})})
        model, chunk, prompt_tokens, output_tokens = first.model or self.parsed.model, first, 0, 0
        is_first = True
        try:
            while chunk is not grpc.aio.EOF:
                self.timer.tokens(model, time.perf_counter(), chunk.output_tokens)
                reason = convert.finish_reason(chunk.finish_reason) if chunk.finished else None
                event = convert.chunk_json(self.parsed, model, chunk.text, reason, is_first)
                if is_first:
                    event["hetflow"] = self._extra(chunk)
                is_first, output_tokens = False, chunk.output_tokens
                await send({"type": "http.response.body", "body": _sse(event), "more_body": True})
                if chunk.finished:
                    prompt_tokens = chunk.usage.prompt_tokens
                    self.timer.finished(model, time.perf_counter(), reason or "stop", prompt_tokens, output_tokens)
                    break
                chunk = await self._read(call)
            if self.parsed.include_usage:
                usage = convert.usage_chunk_json(self.parsed, model, prompt_tokens, output_tokens)
                await send({"type": "http.response.body", "body": _sse(usage), "more_body": True})
        except grpc.aio.AioRpcError as exc:
            error = from_grpc(exc)
            REQUEST_FAILURE.labels(str(error.status_code)).inc()
            await send({"type": "http.response.body", "body": _sse(error.body()), "more_body": True})
        await send({"type": "http.response.body", "body": _sse("[DONE]"), "more_body": False})

    async def _whole(self, call: Any, send: Send) -> None:
        first = await self._first(call, send)
        if first is None:
            return
        model, texts, chunk = first.model or self.parsed.model, [], first
        try:
            while chunk is not grpc.aio.EOF:
                self.timer.tokens(model, time.perf_counter(), chunk.output_tokens)
                texts.append(chunk.text)
                if chunk.finished:
                    break
                chunk = await self._read(call)
        except grpc.aio.AioRpcError as exc:
            await send_error(send, from_grpc(exc))
            return
        if chunk is grpc.aio.EOF:
            await send_error(send, OpenAIError(502, "the balancer ended the call before it finished", "internal_error"))
            return
        reason = convert.finish_reason(chunk.finish_reason)
        self.timer.finished(model, time.perf_counter(), reason, chunk.usage.prompt_tokens, chunk.output_tokens)
        body = convert.reply_json(self.parsed, model, "".join(texts), reason, chunk.usage.prompt_tokens,
                                  chunk.output_tokens)
        body["hetflow"] = {**self._extra(first), "queued_s": chunk.queued_s}
        await send_json(send, 200, body, self._headers(first))
