"""A streamed ``/v1/completions`` call to a vLLM server, read as hetflow reads it: the engine service's
``vllm-server`` backend, and a caller that streams from the model server an engine granted it (issue 34,
``Engine.Hold``). One module, so both read the server's events the same way.

The request asks for ``stream_options.continuous_usage_stats``, so every event carries the token counts;
the events that arrive in one network read are read as one batch (splitting the bytes whole costs less
than reading line by line, and what arrived together goes on as one message downstream).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, AsyncIterator

from hetflow.core.errors import InvalidArgument, Unavailable
from hetflow.runtime.http1 import Http1Client


@dataclass(frozen=True)
class CompletionEvent:
    """One streamed event of a completion: its text, the call's output tokens so far, and how it ended."""
    text: str
    output_tokens: int
    prompt_tokens: int
    finish_reason: str
    """Empty until the last event."""


CALLERS_FAULT = frozenset({400, 413, 422})
"""The server's statuses that say the request itself is wrong (vLLM's bad request, too large, invalid);
its other 4xx (401/403: the server wants a key; 404: another path or model; 408: a proxy's timeout) are
the engine's configuration or a passing fault, not the caller's."""


def server_error(status: int, body: bytes) -> Exception:
    """The server's refusal as the domain error the caller sees: INVALID_ARGUMENT where the request is
    wrong (``CALLERS_FAULT``), else UNAVAILABLE (the balancer may decide it again elsewhere)."""
    try:
        message = json.loads(body).get("error", {}).get("message") or body.decode(errors="replace")
    except (ValueError, AttributeError):
        message = body.decode(errors="replace")
    if status in CALLERS_FAULT:
        return InvalidArgument(f"vLLM server refused the request ({status}): {message}")
    return Unavailable(f"vLLM server answered {status}: {message}")


async def event_batches(body: AsyncIterator[bytes]) -> AsyncIterator[list[dict[str, Any]]]:
    """The server's SSE events (``data: {...}`` blocks, as vLLM's server writes them), parsed, a batch
    per network read."""
    pending = b""
    async for data in body:
        *complete, pending = (pending + data).split(b"\n\n")
        events = [event for event in map(_event, complete) if event is not None]
        if events:
            yield events


def _event(block: bytes) -> dict[str, Any] | None:
    block = block.strip()
    if not block.startswith(b"data: ") or block == b"data: [DONE]":
        return None
    try:
        event = json.loads(block[len(b"data: "):])
    except ValueError as exc:
        raise Unavailable(f"vLLM server sent an event that is not JSON: {exc}") from exc
    if not isinstance(event, dict):
        raise Unavailable(f"vLLM server sent an event that is not an object: {event!r:.200}")
    if "error" in event:
        error = event["error"]
        message = error.get("message", error) if isinstance(error, dict) else error
        raise Unavailable(f"vLLM server failed mid-stream: {message}")
    return event


def completion_event(event: dict[str, Any], output_tokens: int, prompt_tokens: int) -> CompletionEvent | None:
    """One parsed event, given the counts so far; None for the closing usage-only event."""
    try:
        choices = event.get("choices") or []
        if not choices:
            return None
        usage = event.get("usage") or {}
        choice = choices[0]
        return CompletionEvent(choice.get("text") or "", int(usage.get("completion_tokens", output_tokens + 1)),
                               int(usage.get("prompt_tokens", prompt_tokens)), choice.get("finish_reason") or "")
    except (AttributeError, TypeError, ValueError) as exc:  # the server's fault, not the caller's
        raise Unavailable(f"vLLM server sent an event not as vLLM's: {exc}: {event!r:.200}") from exc


async def stream_completion(http: Http1Client, url: str, body: bytes | dict[str, Any], request_id: str,
                            prompt_tokens: int) -> AsyncIterator[list[CompletionEvent]]:
    """POST the completion to ``url`` (absolute) and yield its events, a batch per network read; closing
    the iterator closes the HTTP stream, on which vLLM aborts the request. A refusal raises
    ``server_error``'s error; a failed exchange, ``http1``'s."""
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    output_tokens = 0
    async with http.stream("POST", url, body=content,
                           headers={"x-request-id": request_id, "content-type": "application/json"}) as reply:
        if reply.status != 200:
            raise server_error(reply.status, await reply.read())
        async for events in event_batches(reply.iter_bytes()):
            batch = []
            for event in events:
                parsed = completion_event(event, output_tokens, prompt_tokens)
                if parsed is not None:
                    output_tokens, prompt_tokens = parsed.output_tokens, parsed.prompt_tokens
                    batch.append(parsed)
            if batch:
                yield batch
