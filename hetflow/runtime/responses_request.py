"""A Responses API request (``POST /v1/responses``) as a hetflow call: the OpenAI API reference,
"Responses", as vLLM's server accepts it (``vllm/entrypoints/openai/responses``: ``ResponsesRequest``,
``construct_input_messages``). Shared validation and the workflow's identity are ``openai_request``'s.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any, Mapping

from hetflow.runtime.openai_request import (
    ROLE_OF,
    ParsedRequest,
    chat_messages,
    conventions,
    identified,
    invalid,
    message_text,
    offered_tools,
    parallel_tool_calls,
    receipt_flag,
    refuse_what_the_engines_cannot_give,
    requested_model,
    role_of,
    sampling_params,
    stream_flag,
    wire_checked,
    workflow_fields,
    workflow_meta,
)
from hetflow.runtime.tool_calls import TOOL_CALL_OPEN, ToolCall, call_text, result_text
from hetflow.v1 import balancer_pb2


@dataclass(frozen=True)
class Conversation:
    """What a stored response hands on to the next that names it (``previous_response_id``)."""

    messages: tuple[tuple[str, str], ...]
    """Its conversation without system messages, its own answer last (vLLM's ``construct_input_messages``:
    instructions do not carry over)."""
    program_id: str
    """The program its calls ran as: a later response with no identity of its own joins it."""


def _input_item(item: Any, param: str) -> tuple[str, str] | None:
    """One Responses API input item as (role, text): a message (``"type": "message"`` or none) of a string
    or ``input_text``/``output_text`` parts, an earlier ``function_call`` (the assistant's), or a
    ``function_call_output`` (a user turn); reasoning items are skipped, as vLLM skips them."""
    if not isinstance(item, Mapping):
        raise invalid(f"{param} must be an object", param)
    kind = item.get("type", "message")
    if kind == "reasoning":
        return None
    if kind == "function_call":
        if not isinstance(item.get("name"), str) or not isinstance(item.get("arguments", ""), str):
            raise invalid(f"{param} must be a function call with a name and arguments", param)
        return "assistant", call_text(ToolCall(str(item.get("call_id", "")), item["name"], item.get("arguments", "")))
    if kind == "function_call_output":
        output = item.get("output")
        return "user", result_text(output if isinstance(output, str) else json.dumps(output))
    if kind != "message":
        raise invalid(f"{param}.type {kind!r} is not served: message, function_call, function_call_output",
                      f"{param}.type")
    role = role_of(item.get("role"))
    if role is None:
        raise invalid(f"{param}.role must be one of {sorted(ROLE_OF)}, got {item.get('role')!r}", f"{param}.role")
    content = item.get("content")
    if isinstance(content, list):
        content = [{**part, "type": "text"} if isinstance(part, Mapping) and part.get("type") in
                   ("input_text", "output_text") else part for part in content]
    return role, message_text(content, f"{param}.content")


def _input_messages(value: Any) -> list[tuple[str, str]]:
    """The Responses API's ``input``: a string (one user message) or a list of items; an assistant's
    consecutive calls are one turn."""
    if isinstance(value, str):
        if not value:
            raise invalid("input must not be empty", "input")
        return [("user", value)]
    if not isinstance(value, list) or not value:
        raise invalid("input is required: a string or a non-empty list of items", "input")
    out: list[tuple[str, str]] = []
    for i, item in enumerate(value):
        turn = _input_item(item, f"input[{i}]")
        if turn is None:
            continue
        if turn[0] == "assistant" and out and out[-1][0] == "assistant" and TOOL_CALL_OPEN in turn[1]:
            out[-1] = ("assistant", f"{out[-1][1]}\n{turn[1]}")
        else:
            out.append(turn)
    return out


MAX_METADATA_PAIRS, MAX_METADATA_KEY_CHARS, MAX_METADATA_VALUE_CHARS = 16, 64, 512
"""OpenAI's bounds on a response's ``metadata`` (the API reference, "Responses": 16 pairs, keys of at most
64 characters, string values of at most 512)."""


def _responses_unsupported(body: Mapping[str, Any]) -> None:
    if body.get("background"):
        raise invalid("background responses are not supported", "background")
    refuse_what_the_engines_cannot_give(body)
    include = body.get("include") or []
    if not isinstance(include, list) or not all(isinstance(item, str) for item in include):
        raise invalid("include must be a list of strings", "include")
    if any("logprobs" in item for item in include):
        raise invalid("include: log-probabilities are not supported (the engines return text alone)", "include")
    _check_metadata(body.get("metadata"))
    if body.get("user") is not None and not isinstance(body["user"], str):
        raise invalid("user must be a string", "user")
    text = body.get("text") or {}
    fmt = text.get("format") or {} if isinstance(text, Mapping) else None
    if not isinstance(fmt, Mapping) or fmt.get("type", "text") != "text":
        raise invalid("text.format must be {\"type\": \"text\"}", "text.format")


def _check_metadata(metadata: Any) -> None:
    """``metadata`` within OpenAI's bounds: it is stored and returned with the response."""
    if metadata is None:
        return
    if not isinstance(metadata, Mapping) or len(metadata) > MAX_METADATA_PAIRS:
        raise invalid(f"metadata must be an object of at most {MAX_METADATA_PAIRS} pairs", "metadata")
    for key, value in metadata.items():
        if len(key) > MAX_METADATA_KEY_CHARS or not isinstance(value, str) or len(value) > MAX_METADATA_VALUE_CHARS:
            raise invalid(f"metadata keys must be at most {MAX_METADATA_KEY_CHARS} characters and values strings of "
                          f"at most {MAX_METADATA_VALUE_CHARS}", "metadata")


@wire_checked
def parse_responses(body: Any, headers: Mapping[str, str], default_max_tokens: int, router_model: str,
                    served_models: frozenset[str], previous: Conversation | None) -> ParsedRequest:
    """Validate one ``/v1/responses`` request (the OpenAI API reference, "Responses"; vLLM's
    ``ResponsesRequest``). ``previous``: the stored response its ``previous_response_id`` names, whose
    conversation comes before ``input`` and whose program it joins when it names none of its own."""
    model = requested_model(body, router_model, served_models)
    _responses_unsupported(body)
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise invalid("instructions must be a string", "instructions")
    store = body.get("store", True)
    if not isinstance(store, bool):
        raise invalid("store must be a boolean", "store")
    request_id = f"resp_{uuid.uuid4().hex}"
    fields = identified(workflow_fields(body, headers), conventions(body, headers), time.time())
    if "program_id" not in fields and (previous is not None or store):
        # a conversation that may go on is a program of unknown length: its stages are inferred
        fields = {"identity_source": "previous_response_id" if previous else "response", **fields,
                  "program_id": previous.program_id if previous else request_id}
    history = list(previous.messages) if previous else []
    tools = offered_tools(body, flat=True)
    added = _input_messages(body.get("input"))
    turns = ([("system", instructions)] if instructions else []) + history + added
    request = balancer_pb2.GenerateRequest(
        request_id=request_id, sampling=sampling_params(body, "responses", default_max_tokens),
        workflow=workflow_meta(fields, request_id), model_pin="" if model == router_model else model,
        want_receipt=receipt_flag(fields.get("receipt", False)))
    request.messages.extend(chat_messages(request.workflow, turns, tools))
    return ParsedRequest(request, "responses", model, stream_flag(body), False, int(time.time()), tools,
                         parallel_tool_calls(body), tuple(history),
                         tuple(turn for turn in added if turn[0] != "system"))
