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
from typing import Any, Awaitable, Callable, Protocol, Sequence

import grpc

from gateway_svc import convert
from gateway_svc.metrics import GATEWAY_OVERHEAD_S, REQUEST_FAILURE, RequestTimer
from hetflow.runtime.openai_request import OpenAIError, ParsedRequest, from_grpc
from hetflow.runtime.tool_calls import CallStream, ToolCall, parse_calls
from hetflow.v1 import balancer_pb2

OpenCall = Callable[[balancer_pb2.GenerateRequest, tuple[tuple[str, str], ...]], Any]
"""Starts a call's stream (``Gateway.call``): anything with ``read()`` and ``cancel()``."""

Send = Callable[[dict[str, Any]], Awaitable[None]]


class Reply(Protocol):
    """How one API shapes a call's answer: the SSE events of a stream (each method returns them, encoded),
    or the whole reply's body."""

    def opening(self, model: str, extra: dict[str, Any]) -> list[bytes]:
        """Before the first text; ``extra``: the ``hetflow`` field (where it runs, the receipt)."""

    def text(self, model: str, text: str, finish_reason: str | None, extra: dict[str, Any] | None) -> list[bytes]:
        """One chunk's text; ``extra`` on the first chunk only; ``finish_reason`` on the last."""

    def closing(self, model: str, finish_reason: str, prompt_tokens: int, output_tokens: int) -> list[bytes]:
        """After the last text."""

    def failed(self, error: OpenAIError) -> list[bytes]:
        """The stream's end when the call failed after it started."""

    def whole(self, model: str, text: str, finish_reason: str, prompt_tokens: int, output_tokens: int,
              extra: dict[str, Any]) -> dict[str, Any]:
        """The reply of a call not streamed."""

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
    await send_json(send, error.status_code, error.body(), error.headers())


def sse(data: dict[str, Any] | str, event: str = "") -> bytes:
    """One server-sent event; ``event`` names it (the Responses API's events are named)."""
    named = f"event: {event}\n" if event else ""
    return f"{named}data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class CallResponse:
    """Runs ``parsed`` as this request's response."""

    def __init__(self, open_call: OpenCall, parsed: ParsedRequest, received_s: float,
                 metadata: Sequence[tuple[str, str]] = (), reply: Reply | None = None,
                 on_end: Callable[[], None] = lambda: None) -> None:
        """``received_s``: ``time.perf_counter()`` when the request reached the gateway; ``metadata``: the
        caller's API key, passed on; ``reply``: the API's shapes (default: Chat Completions'/Completions');
        ``on_end``: called once when the response has ended, however it ended."""
        self.open_call, self.parsed, self.received_s = open_call, parsed, received_s
        self.reply: Reply = reply or ChatReply(parsed)
        self.metadata = tuple(metadata)
        self.timer = RequestTimer(received_s)
        self._awaiting_balancer_s = 0.0
        self._on_end = on_end

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        try:
            call = self.open_call(self.parsed.request, self.metadata)
        except BaseException:
            self._on_end()  # the call never opened: it ends here
            raise
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
            self._on_end()

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
        reply, model, chunk, prompt_tokens, output_tokens = self.reply, first.model or self.parsed.model, first, 0, 0
        events = reply.opening(model, self._extra(first))
        try:
            while chunk is not grpc.aio.EOF:
                self.timer.tokens(model, time.perf_counter(), chunk.output_tokens)
                reason = convert.finish_reason(chunk.finish_reason) if chunk.finished else None
                events.extend(reply.text(model, chunk.text, reason, self._extra(chunk) if chunk is first else None))
                output_tokens = chunk.output_tokens
                await send({"type": "http.response.body", "body": b"".join(events), "more_body": True})
                events = []
                if chunk.finished:
                    prompt_tokens = chunk.usage.prompt_tokens
                    self.timer.finished(model, time.perf_counter(), reason or "stop", prompt_tokens, output_tokens)
                    events = reply.closing(model, reason or "stop", prompt_tokens, output_tokens)
                    break
                chunk = await self._read(call)
            else:
                events = reply.failed(OpenAIError(502, "the balancer ended the call before it finished",
                                                  "internal_error"))
        except grpc.aio.AioRpcError as exc:
            error = from_grpc(exc)
            REQUEST_FAILURE.labels(str(error.status_code)).inc()
            events = reply.failed(error)
        await send({"type": "http.response.body", "body": b"".join(events), "more_body": False})

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
        body = self.reply.whole(model, "".join(texts), reason, chunk.usage.prompt_tokens, chunk.output_tokens,
                                {**self._extra(first), "queued_s": chunk.queued_s})
        await send_json(send, 200, body, self._headers(first))


class ChatReply:
    """Chat Completions' and Completions' shapes (``gateway_svc.convert``): one SSE event per chunk, the
    usage chunk when ``stream_options.include_usage`` asks, ``[DONE]`` last. With tools offered, the text
    from a ``<tool_call>`` tag on is held and its calls sent as ``tool_calls`` with the last event
    (finish reason ``tool_calls``), as vLLM's server does with a tool parser."""

    def __init__(self, parsed: ParsedRequest) -> None:
        self.parsed = parsed
        self._first = True
        self._calls = CallStream() if parsed.tools else None

    def opening(self, model: str, extra: dict[str, Any]) -> list[bytes]:
        return []

    def text(self, model: str, text: str, finish_reason: str | None, extra: dict[str, Any] | None) -> list[bytes]:
        calls: list[ToolCall] = []
        if self._calls is not None:
            text = self._calls.feed(text)
            if finish_reason is not None:
                rest, calls = self._calls.finish()
                calls = self.parsed.calls_kept(calls)
                text += rest
                finish_reason = "tool_calls" if calls else finish_reason
        event = convert.chunk_json(self.parsed, model, text, finish_reason, self._first, calls)
        if extra is not None:
            event["hetflow"] = extra
        self._first = False
        return [sse(event)]

    def closing(self, model: str, finish_reason: str, prompt_tokens: int, output_tokens: int) -> list[bytes]:
        usage = [sse(convert.usage_chunk_json(self.parsed, model, prompt_tokens, output_tokens))] \
            if self.parsed.include_usage else []
        return [*usage, sse("[DONE]")]

    def failed(self, error: OpenAIError) -> list[bytes]:
        return [sse(error.body()), sse("[DONE]")]

    def whole(self, model: str, text: str, finish_reason: str, prompt_tokens: int, output_tokens: int,
              extra: dict[str, Any]) -> dict[str, Any]:
        calls: list[ToolCall] = []
        if self.parsed.tools:
            text, calls = parse_calls(text)
            calls = self.parsed.calls_kept(calls)
            finish_reason = "tool_calls" if calls else finish_reason
        body = convert.reply_json(self.parsed, model, text, finish_reason, prompt_tokens, output_tokens, calls)
        body["hetflow"] = extra
        return body
