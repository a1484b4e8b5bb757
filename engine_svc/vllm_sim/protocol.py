"""vLLM 0.32's OpenAI request checks and response shapes, for the simulated server.

What a client sees is what ``vllm serve`` 0.32 sends (``vllm/entrypoints/openai/completion/protocol.py``,
``chat_completion/protocol.py``, ``serve/engine/protocol.py``, ``serve/exception_handling/``): errors
nested as ``{"error": {"message", "type", "param", "code"}}`` with the HTTP status as ``code``; a body
that fails validation is 400 ``Bad Request``; a check vLLM raises itself is 400 ``BadRequestError``
with `` (parameter=X, value=Y)`` after its message; an unknown model is 404. Unknown fields are
accepted and ignored, as vLLM's ``extra="allow"`` models do. Completions default ``max_tokens`` to 16,
chat to what the context leaves; a prompt plus ``max_tokens`` past the context is clamped, not refused.

Served as vLLM serves it, with two stated limits: one prompt per request and ``n`` = 1 (a list of
prompts or ``n`` > 1 is a 400 naming the field).
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any, Mapping

VLLM_VERSION = "0.32.0"
COMPLETIONS_DEFAULT_MAX_TOKENS = 16


class VllmHttpError(Exception):
    """An error as vLLM's server answers it."""

    def __init__(self, status: int, error_type: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.error_type, self.message, self.param = status, error_type, message, param

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.error_type, "param": self.param,
                          "code": self.status}}


def bad_request(message: str, param: str | None = None, value: Any = None) -> VllmHttpError:
    """A check vLLM raises itself (``VLLMValidationError``): the parameter and value follow the message."""
    suffix = "" if param is None else f" (parameter={param}" + ("" if value is None else f", value={value}") + ")"
    return VllmHttpError(400, "BadRequestError", message + suffix, param)


def invalid_body(kind: str, loc: str, msg: str, given: Any) -> VllmHttpError:
    """A body that fails pydantic's validation: FastAPI's ``RequestValidationError`` as vLLM reports it."""
    shown = f"<{type(given).__name__} of {len(given)} items>" if isinstance(given, (dict, list)) else repr(given)
    detail = {"type": kind, "loc": loc, "msg": msg, "input": shown}
    return VllmHttpError(400, "Bad Request", f"1 validation error:\n  {detail}", loc)


def unknown_model(model: str, served: tuple[str, ...]) -> VllmHttpError:
    return VllmHttpError(404, "NotFoundError",
                         f"The model `{model}` does not exist. Valid aliases: {', '.join(served)}.", "model")


def parse_json_body(raw: bytes, content_type: str) -> dict[str, Any]:
    if content_type.split(";")[0].strip().lower() != "application/json":
        raise VllmHttpError(400, "Bad Request",
                            "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed")
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise invalid_body("json_invalid", "body", "JSON decode error", {}) from exc
    if not isinstance(body, dict):
        raise invalid_body("model_attributes_type", "body", "Input should be a valid dictionary or object",
                           body)
    return body


@dataclass(frozen=True)
class GenerateRequest:
    """A completion or chat request, checked and tokenized: what the engine runs."""

    chat: bool
    request_id: str
    """vLLM's response id: ``cmpl-`` or ``chatcmpl-`` and the caller's ``X-Request-Id``, ``request_id``
    or 16 random hex digits."""
    model: str
    prompt_token_ids: tuple[int, ...]
    max_tokens: int
    ignore_eos: bool
    min_tokens: int
    priority: int
    stream: bool
    include_usage: bool
    continuous_usage: bool


def _typed(body: Mapping[str, Any], name: str, kind: type, default: Any) -> Any:
    """The field, or ``default`` when absent or null; a wrong type is pydantic's 400."""
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        kind_name = {int: "integer", bool: "boolean", str: "string", dict: "dictionary"}[kind]
        raise invalid_body(f"{kind_name}_type", f"body.{name}", f"Input should be a valid {kind_name}", value)
    return value


def served_model(body: Mapping[str, Any], served: tuple[str, ...]) -> str:
    """The model the request names, or the first served name when it names none (vLLM's _check_model)."""
    model = _typed(body, "model", str, None)
    if model is None:
        return served[0]
    if model not in served:
        raise unknown_model(model, served)
    return model


def _stream_options(body: Mapping[str, Any], stream: bool) -> tuple[bool, bool]:
    options = _typed(body, "stream_options", dict, None)
    if options is None:
        return False, False
    if not stream:
        raise bad_request("Stream options can only be defined when `stream=True`.", "stream_options")
    include = bool(options.get("include_usage", False))
    return include, include and bool(options.get("continuous_usage_stats", False))


def _check_vllm_xargs(body: Mapping[str, Any]) -> None:
    """``vllm_xargs`` as vLLM types it (strings, numbers or lists of them); accepted, then ignored, as by an
    engine without a logits processor or plugin that reads it."""
    xargs = _typed(body, "vllm_xargs", dict, {})
    for key, value in xargs.items():
        items = value if isinstance(value, list) else [value]
        if not isinstance(key, str) or not all(isinstance(v, (str, int, float)) and not isinstance(v, bool)
                                               for v in items):
            raise invalid_body("value_error", f"body.vllm_xargs.{key}",
                               "Input should be a string, an integer, a number or a list of them", value)


def max_tokens_for(requested: int | None, prompt_tokens: int, max_model_len: int, text_prompt: bool,
                   name: str = "max_tokens") -> int:
    """vLLM's length checks: ``max_tokens`` within the context, the prompt within it, and ``max_tokens``
    clamped to what the context leaves after the prompt (``renderers/params.py``, ``get_max_tokens``)."""
    if requested is not None and requested > max_model_len:
        raise bad_request(f"{name}={requested} cannot be greater than max_model_len={max_model_len}. "
                          "Please request fewer output tokens.", name, requested)
    if prompt_tokens > max_model_len:
        at_least = f"at least {max_model_len + 1}" if text_prompt else str(prompt_tokens)
        raise bad_request(f"This model's maximum context length is {max_model_len} tokens. However, your prompt "
                          f"contains {at_least} input tokens, which exceeds this limit even without any output "
                          "tokens. Please reduce the length of the input prompt.", "input_tokens", prompt_tokens)
    left = max_model_len - prompt_tokens
    max_tokens = left if requested is None else min(requested, left)
    if max_tokens < 1:
        raise bad_request(f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens", max_tokens)
    return max_tokens


def request_id_of(body: Mapping[str, Any], header_request_id: str | None, chat: bool) -> str:
    given = header_request_id or _typed(body, "request_id", str, "") or secrets.token_hex(8)
    return ("chatcmpl-" if chat else "cmpl-") + given


def common_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    """What completions and chat share: streaming, sampling extras, priority (``vllm_xargs`` checked)."""
    _check_vllm_xargs(body)
    stream = bool(_typed(body, "stream", bool, False))
    include_usage, continuous = _stream_options(body, stream)
    if _typed(body, "n", int, 1) != 1:
        raise bad_request("hetflow's vllm-sim serves n=1 only.", "n", body.get("n"))
    return {"stream": stream, "include_usage": include_usage, "continuous_usage": continuous,
            "ignore_eos": bool(_typed(body, "ignore_eos", bool, False)),
            "min_tokens": _typed(body, "min_tokens", int, 0), "priority": _typed(body, "priority", int, 0)}


def completion_prompt(body: Mapping[str, Any]) -> str | tuple[int, ...]:
    """The one prompt of a completion request: text, or token ids used as they are."""
    prompt = body.get("prompt")
    if prompt is None or prompt == "" or prompt == []:
        raise bad_request("Either prompt or prompt_embeds must be provided and non-empty.", "prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt):
        return tuple(prompt)
    if isinstance(prompt, list) and all(isinstance(p, (str, list)) for p in prompt):
        raise bad_request("hetflow's vllm-sim serves one prompt per request.", "prompt")
    raise invalid_body("value_error", "body.prompt", "Input should be a string or a list of token ids", prompt)


def chat_messages(body: Mapping[str, Any]) -> list[dict[str, str]]:
    """The messages with their content as text (an OpenAI content list's text parts joined)."""
    messages = body.get("messages")
    if messages is None:
        raise invalid_body("missing", "body.messages", "Field required", dict(body))
    if not isinstance(messages, list):
        raise invalid_body("list_type", "body.messages", "Input should be a valid list", messages)
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise invalid_body("missing", f"body.messages.{i}.role", "Field required", message)
        content = message.get("content") or ""
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        if not isinstance(content, str):
            raise invalid_body("string_type", f"body.messages.{i}.content", "Input should be a valid string",
                               content)
        out.append({"role": message["role"], "content": content})
    return out


def chat_max_tokens(body: Mapping[str, Any]) -> tuple[int | None, str]:
    """``max_completion_tokens`` wins over the deprecated ``max_tokens``; None: what the context leaves."""
    if body.get("max_completion_tokens") is not None:
        return _typed(body, "max_completion_tokens", int, None), "max_completion_tokens"
    return _typed(body, "max_tokens", int, None), "max_tokens"


def completion_max_tokens(body: Mapping[str, Any]) -> int:
    return _typed(body, "max_tokens", int, COMPLETIONS_DEFAULT_MAX_TOKENS)


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens}


def whole_response(req: GenerateRequest, created: int, text: str, finish_reason: str, prompt_tokens: int,
                   completion_tokens: int, fingerprint: str) -> dict[str, Any]:
    """The non-streamed answer (``CompletionResponse`` / ``ChatCompletionResponse``)."""
    counts = {**usage(prompt_tokens, completion_tokens), "prompt_tokens_details": None,
              "completion_tokens_details": None}
    tail = {"service_tier": None, "system_fingerprint": fingerprint, "usage": counts}
    if req.chat:
        message = {"role": "assistant", "content": text, "refusal": None, "annotations": None, "audio": None,
                   "function_call": None, "reasoning": None}
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason,
                  "stop_reason": None, "token_ids": None, "routed_experts": None}
        return {"id": req.request_id, "object": "chat.completion", "created": created, "model": req.model,
                "choices": [choice], **tail, "prompt_logprobs": None, "prompt_token_ids": None,
                "prompt_text": None, "kv_transfer_params": None, "ec_transfer_params": None, "metrics": None}
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason, "stop_reason": None,
              "token_ids": None, "prompt_logprobs": None, "prompt_token_ids": None, "routed_experts": None}
    return {"id": req.request_id, "object": "text_completion", "created": created, "model": req.model,
            "choices": [choice], **tail, "kv_transfer_params": None, "ec_transfer_params": None, "metrics": None}


def stream_chunk(req: GenerateRequest, created: int, text: str, finish_reason: str | None,
                 running_usage: dict[str, Any] | None = None, fingerprint: str | None = None,
                 role: bool = False) -> dict[str, Any]:
    """One SSE chunk: chat's first (the role), a token chunk, or the one that finishes."""
    if req.chat:
        delta = {"role": "assistant", "content": ""} if role else {"content": text}
        choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        if not role:
            choice["token_ids"] = None
        if finish_reason is not None:
            choice["stop_reason"] = None
        chunk: dict[str, Any] = {"id": req.request_id, "object": "chat.completion.chunk", "created": created,
                                 "model": req.model, "choices": [choice]}
        if role:
            chunk.update(prompt_token_ids=None, prompt_text=None)
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason,
                  "stop_reason": None, "prompt_token_ids": None, "token_ids": None}
        chunk = {"id": req.request_id, "object": "text_completion", "created": created, "model": req.model,
                 "choices": [choice]}
    if running_usage is not None:
        chunk["usage"] = running_usage
    if fingerprint is not None:
        chunk["system_fingerprint"] = fingerprint
    return chunk


def usage_chunk(req: GenerateRequest, created: int, prompt_tokens: int, completion_tokens: int,
                fingerprint: str) -> dict[str, Any]:
    """The last chunk with ``stream_options.include_usage``: no choices, the request's usage."""
    return {"id": req.request_id, "object": "chat.completion.chunk" if req.chat else "text_completion",
            "created": created, "model": req.model, "choices": [], "usage": usage(prompt_tokens, completion_tokens),
            "system_fingerprint": fingerprint}


def sse(payload: Mapping[str, Any] | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


def rendered(req: GenerateRequest) -> dict[str, Any]:
    """vLLM 0.32's answer to a render route (``entrypoints/scale_out/token_in_token_out/protocol.py``,
    ``GenerateRequest``): the prompt's token ids and the sampling parameters the request would run with,
    no multimodal features."""
    return {"request_id": req.request_id, "token_ids": list(req.prompt_token_ids), "token_offsets": None,
            "features": None, "content_parts": None,
            "sampling_params": {"n": 1, "max_tokens": req.max_tokens, "min_tokens": req.min_tokens,
                                "ignore_eos": req.ignore_eos},
            "model": req.model, "reasoning_ended": None, "reasoning_parser_kwargs": None, "return_token_ids": None,
            "output_mode": "tokens", "stream": req.stream,
            "stream_options": {"include_usage": req.include_usage, "continuous_usage_stats": req.continuous_usage}
            if req.stream else None,
            "cache_salt": None, "priority": req.priority}
