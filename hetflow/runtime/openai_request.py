"""OpenAI's request JSON as a hetflow call, and OpenAI-shaped errors: what every HTTP door shares (the
gateway, the endpoint picker behind a standard gateway).

Request shapes follow the OpenAI API reference (Chat Completions, Completions) as vLLM's OpenAI server
accepts them, including its ``ignore_eos`` extension that ``vllm bench serve`` sends. Workflow metadata
(Chimera 3.1: a call's program, agent and stage) comes from ``x-hetflow-*`` headers or from a ``hetflow``
object in the body (the OpenAI SDK's ``extra_body``), which must agree; without them, from the ecosystem's
conventions (``vllm_xargs.agentic_context``, ``agent_hint``, agent frameworks' session headers:
``hetflow.core.identity``). A request with none is a one-call program. Errors have OpenAI's body,
``{"error": {"message", "type", "param", "code"}}`` (the OpenAI API reference, "Error codes"), as vLLM's
OpenAI server writes it
(``vllm/entrypoints/openai/protocol.py``, ErrorResponse).
"""

from __future__ import annotations

import functools
import json
import math
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Mapping, ParamSpec

import grpc

from hetflow.core import identity
from hetflow.runtime.interceptors import never_fits, retry_pushback_s
from hetflow.runtime.tool_calls import (
    Tool,
    ToolCall,
    assistant_text,
    result_text,
    tools_prompt,
)
from hetflow.v1 import balancer_pb2, common_pb2

P = ParamSpec("P")

HTTP_OF_STATUS: dict[grpc.StatusCode, tuple[int, str]] = {
    grpc.StatusCode.INVALID_ARGUMENT: (400, "invalid_request_error"),
    grpc.StatusCode.FAILED_PRECONDITION: (400, "invalid_request_error"),
    grpc.StatusCode.OUT_OF_RANGE: (400, "invalid_request_error"),
    grpc.StatusCode.UNAUTHENTICATED: (401, "authentication_error"),
    grpc.StatusCode.PERMISSION_DENIED: (403, "permission_error"),
    grpc.StatusCode.NOT_FOUND: (404, "not_found_error"),
    grpc.StatusCode.ALREADY_EXISTS: (409, "conflict_error"),
    grpc.StatusCode.RESOURCE_EXHAUSTED: (429, "rate_limit_error"),
    grpc.StatusCode.CANCELLED: (503, "service_unavailable"),   # a server's (the client's own leaving sends none)
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
    retry_after_s: float | None = None
    """When to try again (a refusal's hint): sent as ``Retry-After``, in whole seconds rounded up."""

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def headers(self) -> dict[str, str]:
        return {} if self.retry_after_s is None else {"retry-after": str(max(1, math.ceil(self.retry_after_s)))}


def invalid(message: str, param: str | None = None, code: str | None = None) -> OpenAIError:
    return OpenAIError(400, message, "invalid_request_error", param, code)


def from_grpc(exc: grpc.aio.AioRpcError) -> OpenAIError:
    """The balancer's (or monitor's) failure as the client sees it, with its retry hint (gRPC's pushback,
    ``hetflow.runtime.interceptors``) as ``Retry-After``. A call no engine can ever hold is the client's
    400 (as vLLM answers a prompt past the model's context), not a 429 that clients would retry for good."""
    if never_fits(exc):
        return OpenAIError(400, exc.details() or "the call can never fit", "invalid_request_error", None,
                           "context_length_exceeded")
    return from_status(exc.code(), exc.details(), retry_pushback_s(exc))


def from_status(code: grpc.StatusCode, message: str, retry_after_s: float | None = None) -> OpenAIError:
    """A gRPC status as its OpenAI-shaped error (``HTTP_OF_STATUS``), ``retry_after_s`` its ``Retry-After``."""
    status, kind = HTTP_OF_STATUS.get(code, (500, "internal_error"))
    return OpenAIError(status, message or code.name, kind, None, code.name.lower(), retry_after_s)


HEADER_OF_FIELD = {
    "program_id": "x-hetflow-program-id",
    "workflow": "x-hetflow-workflow",
    "agent": "x-hetflow-agent",
    "stage_index": "x-hetflow-stage",
    "stage_count": "x-hetflow-stage-count",
    "upstream_agent": "x-hetflow-upstream-agent",
    "tenant": "x-hetflow-tenant",
    "deadline_unix_s": "x-hetflow-deadline-unix-s",
    "receipt": "x-hetflow-receipt",
}
"""Each workflow field's header; the body's ``hetflow`` object takes the same field names."""
TEXT_FIELDS = ("program_id", "workflow", "agent", "upstream_agent", "tenant")
IDENTITY_FIELDS = ("program_id", "agent", "upstream_agent", "stage_index", "stage_count")
"""hetflow's own fields that name a call's place; any of them makes hetflow's the convention that does."""
MAX_TOKENS_KEYS = {"chat": ("max_completion_tokens", "max_tokens"), "completion": ("max_tokens",),
                   "responses": ("max_output_tokens",)}
"""Where each API takes the output limit, in precedence order."""
ROLE_OF = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
"""OpenAI's roles the engines' chat templates take; ``developer`` is OpenAI's newer name for system."""


def role_of(value: Any) -> str | None:
    """The engines' role for a message's ``role``; None for anything else (a list included)."""
    return ROLE_OF.get(value) if isinstance(value, str) else None


@dataclass(frozen=True)
class ParsedRequest:
    """One OpenAI request, validated, as the balancer call it becomes."""

    request: balancer_pb2.GenerateRequest
    kind: str
    """"chat", "completion" or "responses"."""
    model: str
    """The model the client named."""
    stream: bool
    include_usage: bool
    created_unix_s: int
    tools: tuple[Tool, ...] = ()
    """The functions offered (``tool_calls``): the answer's calls are read out of its text."""
    parallel_tool_calls: bool = True
    """False: the answer's first tool call alone is returned (OpenAI's ``parallel_tool_calls``)."""
    history: tuple[tuple[str, str], ...] = ()
    """The Responses API's conversation before this call's input, without system messages: the stored
    response's own strings, which the stored answer to this call shares."""
    added: tuple[tuple[str, str], ...] = ()
    """The Responses API's turns this call's input adds, without system messages."""

    def calls_kept(self, calls: list[ToolCall]) -> list[ToolCall]:
        """The answer's tool calls as returned: its first alone where ``parallel_tool_calls`` is false."""
        return calls if self.parallel_tool_calls else calls[:1]


def _number(value: Any, param: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise invalid(f"{param} must be a number, got {value!r}", param)
    if not low <= value <= high:
        raise invalid(f"{param} must be in [{low:g}, {high:g}], got {value!r}", param)
    return float(value)


def _integer(value: Any, param: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise invalid(f"{param} must be an integer of at least {low}, got {value!r}", param)
    return value


def sampling_params(body: Mapping[str, Any], kind: str, default_max_tokens: int) -> common_pb2.SamplingParams:
    keys = MAX_TOKENS_KEYS[kind]
    key = next((k for k in keys if body.get(k) is not None), None)
    max_tokens = _integer(body[key], key, 1) if key else default_max_tokens
    sampling = common_pb2.SamplingParams(max_tokens=max_tokens)
    if body.get("temperature") is not None:
        sampling.temperature = _number(body["temperature"], "temperature", 0.0, 2.0)
    if body.get("top_p") is not None:
        sampling.top_p = _number(body["top_p"], "top_p", 1e-9, 1.0)
    if body.get("seed") is not None:
        sampling.seed = _integer(body["seed"], "seed", 0)
    for penalty in ("presence_penalty", "frequency_penalty"):
        if body.get(penalty) is not None:
            setattr(sampling, penalty, _number(body[penalty], penalty, -2.0, 2.0))
    if body.get("n") is not None and (isinstance(body["n"], bool) or body["n"] != 1):
        raise invalid(f"n must be 1 (one choice per call), got {body['n']!r}", "n")
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and not (isinstance(stop, list) and all(isinstance(s, str) for s in stop)):
        raise invalid("stop must be a string or a list of strings", "stop")
    sampling.stop.extend(stop or [])
    if body.get("ignore_eos") is not None:
        if not isinstance(body["ignore_eos"], bool):
            raise invalid("ignore_eos must be a boolean", "ignore_eos")
        sampling.ignore_eos = body["ignore_eos"]
    return sampling


NOT_GIVEN: dict[str, tuple[Any, ...]] = {"logprobs": (False, 0), "top_logprobs": (0,), "echo": (False,),
                                         "best_of": (1,)}
"""OpenAI's fields whose effect the engines do not return, with the values that ask for none of it."""


def refuse_what_the_engines_cannot_give(body: Mapping[str, Any]) -> None:
    """A request asking for what hetflow's engines do not return (token log-probabilities, the prompt
    echoed, several candidates, an answer held to a JSON schema) is the client's 400 at the gateway, naming
    the field, not a 200 without it. (The endpoint picker passes the body to the model server, which
    does return them: it does not refuse them.)"""
    for param, none_asked in NOT_GIVEN.items():
        value = body.get(param)
        if value is not None and not (value in none_asked and type(value) in {type(v) for v in none_asked}):
            raise invalid(f"{param} is not supported (the engines return text alone), got {value!r}", param)
    fmt = body.get("response_format")
    if fmt is not None and fmt != {"type": "text"}:
        raise invalid("response_format must be {\"type\": \"text\"}: the engines return free text", "response_format")
    if body.get("logit_bias"):
        raise invalid("logit_bias is not supported (the engines take no per-token bias)", "logit_bias")


def parallel_tool_calls(body: Mapping[str, Any]) -> bool:
    """OpenAI's ``parallel_tool_calls`` (default true)."""
    value = body.get("parallel_tool_calls")
    if value is not None and not isinstance(value, bool):
        raise invalid("parallel_tool_calls must be a boolean", "parallel_tool_calls")
    return value is not False


def message_text(content: Any, param: str) -> str:
    """A message's text: a string, or OpenAI's list of content parts of type text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for i, part in enumerate(content):
            if not isinstance(part, Mapping) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise invalid(f"{param}[{i}] must be a text part ({{\"type\": \"text\", \"text\": ...}}); "
                              "the engines take text only", f"{param}[{i}]")
            texts.append(part["text"])
        return "".join(texts)
    raise invalid(f"{param} must be a string or a list of text parts", param)


def offered_tools(body: Mapping[str, Any], flat: bool) -> tuple[Tool, ...]:
    """The function tools offered: Chat Completions' ``{"type": "function", "function": {...}}``, or the
    Responses API's ``{"type": "function", "name", ...}`` (``flat``); none when ``tool_choice`` is
    "none". ``tool_choice`` "auto" (the default) lets the model choose; one that forces a call ("required",
    a named function) is refused: the engines answer in free text, which nothing holds to a call."""
    tools, choice = body.get("tools"), body.get("tool_choice")
    if choice not in (None, "auto", "none"):
        raise invalid(f"tool_choice must be \"auto\" or \"none\" (the engines do not force a call), got {choice!r}",
                      "tool_choice")
    if not tools or choice == "none":
        return ()
    if not isinstance(tools, list):
        raise invalid("tools must be a list of function tools", "tools")
    out = []
    for i, tool in enumerate(tools):
        param = f"tools[{i}]"
        if not isinstance(tool, Mapping) or tool.get("type") != "function":
            raise invalid(f"{param} must be a function tool; other tool types are not served", param)
        spec = tool if flat else tool.get("function")
        name_param = f"{param}.name" if flat else f"{param}.function.name"
        if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str) or not spec["name"]:
            raise invalid(f"{param} needs a function name", name_param)
        parameters, description = spec.get("parameters"), spec.get("description") or ""
        if parameters is not None and not isinstance(parameters, Mapping):
            raise invalid(f"{param}'s parameters must be a JSON schema object",
                          name_param.replace("name", "parameters"))
        out.append(Tool(spec["name"], description if isinstance(description, str) else "", parameters))
    return tuple(out)


def with_tools(messages: list[tuple[str, str]], tools: tuple[Tool, ...]) -> list[tuple[str, str]]:
    """The messages with the tools offered in the system prompt (the first system message's end, or a
    system message of their own first)."""
    if not tools:
        return messages
    if messages and messages[0][0] == "system":
        return [("system", f"{messages[0][1]}\n\n{tools_prompt(tools)}"), *messages[1:]]
    return [("system", tools_prompt(tools)), *messages]


def _tool_calls(value: Any, param: str) -> list[ToolCall]:
    """An assistant message's earlier ``tool_calls``."""
    if not isinstance(value, list):
        raise invalid(f"{param} must be a list of function calls", param)
    calls = []
    for i, call in enumerate(value):
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise invalid(f"{param}[{i}] must be {{\"type\": \"function\", \"function\": {{\"name\", "
                          f"\"arguments\"}}}}", f"{param}[{i}]")
        arguments = function.get("arguments", "")
        calls.append(ToolCall(str(call.get("id", "")), function["name"],
                              arguments if isinstance(arguments, str) else json.dumps(arguments)))
    return calls


def _message(m: Any, param: str) -> tuple[str, str]:
    """One chat message as (role, text): a tool's result is a user turn, an assistant's calls its text."""
    if not isinstance(m, Mapping):
        raise invalid(f"{param} must be an object with role and content", param)
    if m.get("role") == "tool":
        return "user", result_text(message_text(m.get("content"), f"{param}.content"))
    role = role_of(m.get("role"))
    if role is None:
        raise invalid(f"{param}.role must be one of {sorted([*ROLE_OF, 'tool'])}, got {m.get('role')!r}",
                      f"{param}.role")
    if role == "assistant" and m.get("tool_calls"):
        content = message_text(m.get("content") or "", f"{param}.content")
        return role, assistant_text(content, _tool_calls(m["tool_calls"], f"{param}.tool_calls"))
    return role, message_text(m.get("content"), f"{param}.content")


def _turns(body: Mapping[str, Any]) -> list[tuple[str, str]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("messages is required: a non-empty list of {role, content}", "messages")
    return [_message(m, f"messages[{i}]") for i, m in enumerate(messages)]


def chat_messages(meta: common_pb2.WorkflowMeta, turns: list[tuple[str, str]],
                  tools: tuple[Tool, ...]) -> list[common_pb2.ChatMessage]:
    """The call's messages, tools offered; a convention that named the program but not its agent leaves
    the agent to be named by the call's instructions (``identity.agent_of_instructions``), before the
    tools join them."""
    if not meta.agent and meta.identity_source not in ("hetflow", "none"):
        meta.agent = identity.agent_of_instructions(next((c for r, c in turns if r == "system"), ""))
    return [common_pb2.ChatMessage(role=role, content=content) for role, content in with_tools(turns, tools)]


def _prompt(body: Mapping[str, Any]) -> str:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str) or not prompt:
        raise invalid("prompt is required: one non-empty string (token-id and batched prompts are not "
                      "supported)", "prompt")
    return prompt


def _header_values(headers: Mapping[str, str], name: str) -> list[str]:
    """Every value of a header (Starlette's ``getlist``; one value from a plain mapping)."""
    getlist = getattr(headers, "getlist", None)
    if getlist is not None:
        return list(getlist(name))
    return [headers[name]] if name in headers else []


def _same(a: Any, b: Any) -> bool:
    """One field's two spellings agree: ``"2"`` and ``2``, ``"true"`` and ``True``."""
    return str(a).strip().lower() == str(b).strip().lower()


def _hetflow_headers(headers: Mapping[str, str]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for name, header in HEADER_OF_FIELD.items():
        values = _header_values(headers, header)
        if any(not _same(v, values[0]) for v in values[1:]):
            raise invalid(f"the {header} header is given twice with different values ({values[0]!r} and "
                          f"{next(v for v in values if not _same(v, values[0]))!r})", header)
        if values:
            fields[name] = values[0]
    return fields


def workflow_fields(body: Mapping[str, Any], headers: Mapping[str, str]) -> dict[str, Any]:
    """hetflow's own workflow fields: the ``x-hetflow-*`` headers and the body's ``hetflow`` object, which
    must agree where both name a field."""
    fields = _hetflow_headers(headers)
    extra = body.get("hetflow")
    if extra is None:
        return fields
    if not isinstance(extra, Mapping):
        raise invalid("hetflow must be an object of workflow fields", "hetflow")
    unknown = sorted(set(extra) - set(HEADER_OF_FIELD))
    if unknown:
        raise invalid(f"hetflow has unknown field(s) {unknown}; known: {sorted(HEADER_OF_FIELD)}",
                      f"hetflow.{unknown[0]}")
    for name, value in extra.items():
        if name in fields and not _same(fields[name], value):
            raise invalid(f"the {HEADER_OF_FIELD[name]} header ({fields[name]!r}) and hetflow.{name} ({value!r}) "
                          "differ", f"hetflow.{name}")
        fields[name] = value
    return fields


def conventions(body: Mapping[str, Any], headers: Mapping[str, str]) -> identity.Conventions:
    """The ecosystem's identity conventions the request carries (``hetflow.core.identity``)."""
    xargs = body.get("vllm_xargs")
    if xargs is not None and not isinstance(xargs, Mapping):
        raise invalid("vllm_xargs must be an object", "vllm_xargs")
    return identity.Conventions(
        agentic_context=(xargs or {}).get("agentic_context"), agent_hint=body.get("agent_hint"),
        headers={h: _header_values(headers, h) for h in identity.IDENTITY_HEADERS})


def identified(fields: dict[str, Any], conventions: identity.Conventions, now_unix_s: float) -> dict[str, Any]:
    """The workflow fields with the call's identity: hetflow's own when they name any of it, else the first
    convention present (``hetflow.core.identity.resolve``); per-call fields (workflow, tenant, deadline,
    receipt) apply over either."""
    if any(name in fields for name in IDENTITY_FIELDS):
        return {**fields, "identity_source": "hetflow"}
    try:
        found = identity.resolve(conventions, now_unix_s)
    except identity.IdentityError as exc:
        raise invalid(str(exc), exc.param) from exc
    if found is None:
        return fields
    named: dict[str, Any] = {"program_id": found.program_id, "agent": found.agent,
                             "upstream_agent": found.upstream_agent, "identity_source": found.source}
    if found.deadline_unix_s:
        named["deadline_unix_s"] = found.deadline_unix_s
    return {**named, **fields}


def _field_int(fields: Mapping[str, Any], name: str) -> int | None:
    if name not in fields:
        return None
    value = fields[name]
    try:
        number = int(value) if isinstance(value, str) else value
    except ValueError:
        number = None
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise invalid(f"{name} ({HEADER_OF_FIELD[name]}) must be a positive integer, got {value!r}", name)
    return number


def _deadline(fields: Mapping[str, Any]) -> float:
    if "deadline_unix_s" not in fields:
        return 0.0
    value = fields["deadline_unix_s"]
    try:
        deadline = float(value) if isinstance(value, (str, int, float)) and not isinstance(value, bool) else math.nan
    except ValueError:
        deadline = math.nan
    if not math.isfinite(deadline) or deadline <= 0:
        raise invalid(f"deadline_unix_s ({HEADER_OF_FIELD['deadline_unix_s']}) must be a Unix time in seconds, "
                      f"got {value!r}", "deadline_unix_s")
    return deadline


def receipt_flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("1", "true", "yes", "0", "false", "no", ""):
        return value.lower() in ("1", "true", "yes")
    raise invalid(f"receipt ({HEADER_OF_FIELD['receipt']}) must be true or false, got {value!r}", "receipt")


def _text_field(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise invalid(f"{name} must be a string, got {value!r}", name)
    if not value:
        return value
    try:
        return identity.identifier(value, name)
    except identity.IdentityError as exc:
        raise invalid(str(exc), exc.param) from exc


def workflow_meta(fields: Mapping[str, Any], request_id: str) -> common_pb2.WorkflowMeta:
    """The call's place in its workflow; without a program id it is a one-call program."""
    for name in TEXT_FIELDS:
        if name in fields:
            fields = {**fields, name: _text_field(fields[name], name)}
    meta = common_pb2.WorkflowMeta(**{n: fields[n] for n in TEXT_FIELDS if n in fields},
                                   deadline_unix_s=_deadline(fields),
                                   identity_source=fields.get("identity_source", ""))
    stage_index, stage_count = _field_int(fields, "stage_index"), _field_int(fields, "stage_count")
    if not meta.program_id:
        meta.program_id, meta.identity_source = request_id, "none"
        stage_index, stage_count = stage_index or 1, stage_count or 1
    if stage_index is not None:
        meta.stage_index = stage_index
    if stage_count is not None:
        meta.stage_count = stage_count
    return meta


def requested_model(body: Any, router_model: str, served_models: frozenset[str]) -> str:
    if not isinstance(body, Mapping):
        raise invalid("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("model is required: a model from /v1/models", "model")
    if model != router_model and model not in served_models:
        raise OpenAIError(404, f"The model {model!r} does not exist; served: {sorted(served_models)} "
                          f"(or {router_model!r} to let hetflow choose)", "not_found_error", "model", "model_not_found")
    return model


def stream_flag(body: Mapping[str, Any]) -> bool:
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise invalid("stream must be a boolean", "stream")
    return stream


def wire_checked(parse_request: Callable[P, ParsedRequest]) -> Callable[P, ParsedRequest]:
    """A request whose values the wire cannot carry (a number past its protobuf field's range, a string
    with a lone surrogate, which JSON allows) is the client's 400, not the gateway's 500."""
    @functools.wraps(parse_request)
    def checked(*args: P.args, **kwargs: P.kwargs) -> ParsedRequest:
        try:
            return parse_request(*args, **kwargs)
        except (ValueError, OverflowError) as exc:  # our own checks raise OpenAIError, which is neither
            raise invalid(f"the request holds a value the API cannot carry: {exc}") from exc
    return checked


@wire_checked
def parse(kind: str, body: Any, headers: Mapping[str, str], default_max_tokens: int,
          router_model: str, served_models: frozenset[str]) -> ParsedRequest:
    """Validate one ``/v1/chat/completions`` (kind "chat") or ``/v1/completions`` request."""
    model = requested_model(body, router_model, served_models)
    request_id = f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{uuid.uuid4().hex}"
    fields = identified(workflow_fields(body, headers), conventions(body, headers), time.time())
    request = balancer_pb2.GenerateRequest(
        request_id=request_id, sampling=sampling_params(body, kind, default_max_tokens),
        workflow=workflow_meta(fields, request_id), model_pin="" if model == router_model else model,
        want_receipt=receipt_flag(fields.get("receipt", False)))
    tools = offered_tools(body, flat=False) if kind == "chat" else ()
    if kind == "chat":
        request.messages.extend(chat_messages(request.workflow, _turns(body), tools))
    else:
        request.prompt = _prompt(body)
    options = body.get("stream_options") or {}
    if not isinstance(options, Mapping):
        raise invalid("stream_options must be an object", "stream_options")
    include_usage = options.get("include_usage") or False
    if not isinstance(include_usage, bool):
        raise invalid("stream_options.include_usage must be a boolean", "stream_options.include_usage")
    return ParsedRequest(request, kind, model, stream_flag(body), include_usage, int(time.time()), tools,
                         parallel_tool_calls(body))
