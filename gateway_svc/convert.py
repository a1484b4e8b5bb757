"""The balancer's chunks -> OpenAI JSON, as the OpenAI API reference (Chat Completions, Completions)
shapes them and vLLM's OpenAI server writes them. The request side, OpenAI JSON -> a hetflow call, is
``hetflow.runtime.openai_request`` (the endpoint picker reads requests too)."""

from __future__ import annotations

from typing import Any, Sequence

from google.protobuf.json_format import MessageToDict

from hetflow.runtime.openai_request import ParsedRequest
from hetflow.runtime.tool_calls import ToolCall
from hetflow.v1 import balancer_pb2


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def receipt_json(receipt: balancer_pb2.Receipt) -> dict[str, Any]:
    return MessageToDict(receipt, preserving_proto_field_name=True)


def _envelope(parsed: ParsedRequest, model: str, obj: str) -> dict[str, Any]:
    return {"id": parsed.request.request_id, "object": obj, "created": parsed.created_unix_s, "model": model}


def tool_calls_json(calls: Sequence[ToolCall], streamed: bool = False) -> list[dict[str, Any]]:
    """Chat Completions' ``tool_calls``: each call's id and function; a streamed delta's carry their index."""
    return [{**({"index": i} if streamed else {}), "id": c.call_id, "type": "function",
             "function": {"name": c.name, "arguments": c.arguments}} for i, c in enumerate(calls)]


def chunk_json(parsed: ParsedRequest, model: str, text: str, finish_reason: str | None,
               first: bool, calls: Sequence[ToolCall] = ()) -> dict[str, Any]:
    """One SSE event of a streamed completion (``chat.completion.chunk`` or ``text_completion``); ``calls``:
    the answer's tool calls, in its last event."""
    if parsed.kind == "chat":
        delta: dict[str, Any] = {"role": "assistant", "content": text} if first else {"content": text}
        if calls:
            delta["tool_calls"] = tool_calls_json(calls, streamed=True)
        choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return {**_envelope(parsed, model, "chat.completion.chunk"), "choices": [choice]}
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
    return {**_envelope(parsed, model, "text_completion"), "choices": [choice]}


def usage_chunk_json(parsed: ParsedRequest, model: str, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """The last SSE event when ``stream_options.include_usage`` is set: no choices, the usage."""
    obj = "chat.completion.chunk" if parsed.kind == "chat" else "text_completion"
    return {**_envelope(parsed, model, obj), "choices": [], "usage": usage(prompt_tokens, completion_tokens)}


def reply_json(parsed: ParsedRequest, model: str, text: str, finish_reason: str, prompt_tokens: int,
               completion_tokens: int, calls: Sequence[ToolCall] = ()) -> dict[str, Any]:
    """A whole (non-streamed) ``chat.completion`` or ``text_completion``; ``calls``: the answer's tool calls
    (its text then the rest, ``null`` when none, as vLLM's server answers)."""
    if parsed.kind == "chat":
        message: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else text)}
        if calls:
            message["tool_calls"] = tool_calls_json(calls)
        choice: dict[str, Any] = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}
        obj = "chat.completion"
    else:
        choice, obj = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}, "text_completion"
    return {**_envelope(parsed, model, obj), "choices": [choice], "usage": usage(prompt_tokens, completion_tokens)}


def finish_reason(engine_reason: str) -> str:
    """The engine's reason as vLLM's server reports it: "stop", "length", or "abort" (engine drained)."""
    return engine_reason or "stop"
