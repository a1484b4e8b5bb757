"""A call's program identity from the conventions agent frameworks already send (issue 36).

hetflow's program is one workflow run and its agent one role in it (Chimera 3.1). vLLM's router calls
one agent of a task a program (vllm-project/router, ``docs/program_scheduling.md``, "Canonical request
metadata" and "Compatibility identity inputs"), so a vLLM program maps onto a hetflow program and agent:

- ``vllm_xargs.agentic_context``: the program is ``task_id``, else ``session_id``, else the part of
  ``program_id`` before its last ``:`` (vLLM's ``<task>:<agent>``), else ``program_id``; the agent is
  ``agent_id``, else the rest of ``program_id``; the upstream agent is ``parent_agent_id``, else
  ``parent_program_id`` less its task prefix; ``deadline_seconds`` is counted from arrival.
- ``agent_hint``: the program is ``parent_session_id``, else ``session_id``; the agent is ``session_id``
  and the upstream agent ``parent_session_id`` (two levels: a deeper tree needs ``agentic_context``).
- Headers, one schema, the first present of: Claude Code (``x-claude-code-session-id``, ``-agent-id``,
  ``-parent-agent-id``), Codex/OpenCode (``session-id``, ``thread-id``), generic (``x-session-id``). The
  session is the program; the agent is the agent or thread header, its upstream agent the parent-agent
  header. (vLLM's router calls an unnamed agent ``lead`` and makes it every subagent's parent; here an
  unnamed agent is named by its instructions, so no agent is called ``lead`` that never said so.)

A convention that names no agent leaves it to the call's instructions (``agent_of_instructions``).

Precedence (``resolve``): ``agentic_context``, then ``agent_hint``, then one header schema, the router's
own order; hetflow's own fields come before all of them (``hetflow.runtime.openai_request``). Only the
convention chosen is read, so schemas never mix. Values are identifiers: at most
``MAX_IDENTITY_CHARS`` printable characters. The same field given twice within one convention with
different values is refused, naming both places.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from hetflow.core.errors import InvalidArgument

MAX_IDENTITY_CHARS = 256
"""An identity value's longest form (vLLM's router bounds each component to 256 bytes)."""
MAX_AGENTIC_CONTEXT_BYTES = 16 * 1024
"""``agentic_context`` sent as a JSON string, at most this long (the router's bound)."""
AGENTIC_CONTEXT = "vllm_xargs.agentic_context"


class IdentityError(InvalidArgument):
    """An identity value that is malformed, too long, or given twice with different values."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class HeaderSchema:
    """One agent framework's identity headers."""

    source: str
    session: str
    agent: str = ""
    parent_agent: str = ""


HEADER_SCHEMAS = (
    HeaderSchema("claude-code", "x-claude-code-session-id", "x-claude-code-agent-id", "x-claude-code-parent-agent-id"),
    HeaderSchema("codex", "session-id", "thread-id"),
    HeaderSchema("x-session-id", "x-session-id"),
)
"""In precedence order."""
IDENTITY_HEADERS = tuple(h for s in HEADER_SCHEMAS for h in (s.session, s.agent, s.parent_agent) if h)


@dataclass(frozen=True)
class Conventions:
    """What a request carries of the ecosystem's identity conventions."""

    agentic_context: Any = None
    """``vllm_xargs.agentic_context``: an object or its JSON string; None when absent."""
    agent_hint: Any = None
    headers: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """Each identity header's values, by lower-case name."""


@dataclass(frozen=True)
class Identity:
    """A call's place as hetflow reads it from one convention."""

    source: str
    """Which convention named it: ``agentic_context``, ``agent_hint`` or a header schema's source."""
    program_id: str
    agent: str = ""
    upstream_agent: str = ""
    deadline_unix_s: float = 0.0


def resolve(conventions: Conventions, now_unix_s: float) -> Identity | None:
    """The identity of the first convention present, in precedence order; None when none is."""
    if conventions.agentic_context is not None:
        return from_agentic_context(conventions.agentic_context, now_unix_s)
    if conventions.agent_hint is not None:
        return from_agent_hint(conventions.agent_hint)
    for schema in HEADER_SCHEMAS:
        session = header_value(conventions.headers, schema.session)
        if session:
            return from_headers(schema, session, conventions.headers)
    return None


def identifier(value: Any, param: str) -> str:
    """An identity value: a string (or an integer, as the router takes it), trimmed, non-empty, at most
    ``MAX_IDENTITY_CHARS`` printable characters."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise IdentityError(f"{param} must be a string identifier, got {value!r}", param)
    text = value.strip()
    if not text:
        raise IdentityError(f"{param} must not be empty", param)
    if len(text) > MAX_IDENTITY_CHARS:
        raise IdentityError(f"{param} is {len(text)} characters; at most {MAX_IDENTITY_CHARS}", param)
    if not text.isprintable():
        raise IdentityError(f"{param} must be printable characters, got {text!r}", param)
    return text


def header_value(headers: Mapping[str, Sequence[str]], name: str) -> str:
    """One identity header's value ("" when absent or empty); sent twice with different values is refused."""
    values = {v.strip() for v in headers.get(name, ()) if v.strip()}
    if len(values) > 1:
        first, second = sorted(values)[:2]
        raise IdentityError(f"the {name} header is given twice with different values ({first!r} and {second!r})",
                            name)
    return identifier(values.pop(), name) if values else ""


def _object(raw: Any, param: str) -> Mapping[str, Any]:
    if isinstance(raw, str):
        if len(raw.encode()) > MAX_AGENTIC_CONTEXT_BYTES:
            raise IdentityError(f"{param} is longer than {MAX_AGENTIC_CONTEXT_BYTES} bytes", param)
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise IdentityError(f"{param} must be a JSON object: {exc}", param) from exc
    if not isinstance(raw, Mapping):
        raise IdentityError(f"{param} must be an object, got {raw!r}", param)
    return raw


def _field(context: Mapping[str, Any], names: tuple[str, ...], prefix: str) -> tuple[Any, str]:
    """A field and where it was, from any of its names; two names with different values are refused."""
    present = [(n, context[n]) for n in names if context.get(n) is not None]
    if len({json.dumps(v, sort_keys=True) for _, v in present}) > 1:
        (a, va), (b, vb) = present[:2]
        raise IdentityError(f"{prefix}.{a} ({va!r}) and {prefix}.{b} ({vb!r}) name one field with different values",
                            f"{prefix}.{a}")
    return (present[0][1], f"{prefix}.{present[0][0]}") if present else (None, f"{prefix}.{names[0]}")


def _text(context: Mapping[str, Any], prefix: str, *names: str) -> str:
    value, param = _field(context, names, prefix)
    return "" if value is None else identifier(value, param)


def _number(context: Mapping[str, Any], prefix: str, *names: str, integer: bool = False) -> float | None:
    value, param = _field(context, names, prefix)
    if value is None:
        return None
    ok = isinstance(value, int) if integer else isinstance(value, (int, float)) and math.isfinite(value)
    if isinstance(value, bool) or not ok or value < 0:
        kind = "a non-negative integer" if integer else "a non-negative number of seconds"
        raise IdentityError(f"{param} must be {kind}, got {value!r}", param)
    return float(value)


def _flag(context: Mapping[str, Any], prefix: str, *names: str) -> None:
    value, param = _field(context, names, prefix)
    if value is not None and not isinstance(value, bool):
        raise IdentityError(f"{param} must be true or false, got {value!r}", param)


def _checked_hints(context: Mapping[str, Any], prefix: str) -> None:
    """The router's request-scoped hints and flags, checked so a malformed one is a 400 here as there.
    hetflow decides priority, output length and KV retention itself (Chimera 3.3-3.5, Kairos 4.4)."""
    _number(context, prefix, "step_id", integer=True)
    _number(context, prefix, "expected_output_length", "expected_output_tokens", integer=True)
    _number(context, prefix, "kv_retention_ttl_seconds", "kv_retention_ttl")
    _flag(context, prefix, "expected_resume")
    _flag(context, prefix, "blocks_parent", "blocking_parent")
    priority, param = _field(context, ("priority",), prefix)
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        raise IdentityError(f"{param} must be an integer, got {priority!r}", param)


def _below(name: str, task: str) -> str:
    """``name`` less its ``<task>:`` prefix (vLLM's scoped program id), or whole."""
    return name[len(task) + 1:] if name.startswith(f"{task}:") and len(name) > len(task) + 1 else name


def from_agentic_context(raw: Any, now_unix_s: float) -> Identity:
    """vLLM's canonical ``vllm_xargs.agentic_context`` (router ``docs/program_scheduling.md``)."""
    context = _object(raw, AGENTIC_CONTEXT)
    p = AGENTIC_CONTEXT
    program = _text(context, p, "program_id")
    task = _text(context, p, "task_id") or _text(context, p, "session_id") or program.rpartition(":")[0] or program
    if not task:
        raise IdentityError(f"{p} names no program: set program_id, task_id or session_id", f"{p}.program_id")
    agent = _text(context, p, "agent_id") or (_below(program, task) if program != task else "")
    parent = _text(context, p, "parent_agent_id") or _below(_text(context, p, "parent_program_id", "parent_id"), task)
    _text(context, p, "root_program_id", "root_id")
    _checked_hints(context, p)
    deadline_s = _number(context, p, "deadline_seconds", "deadline")
    return Identity("agentic_context", task, _below(agent, task), "" if parent == task else parent,
                    now_unix_s + deadline_s if deadline_s else 0.0)


def from_agent_hint(raw: Any) -> Identity:
    """vLLM's ``agent_hint``: one agent's session and its parent's."""
    hint = _object(raw, "agent_hint")
    session = _text(hint, "agent_hint", "session_id")
    if not session:
        raise IdentityError("agent_hint.session_id is required", "agent_hint.session_id")
    parent = _text(hint, "agent_hint", "parent_session_id")
    if parent == session:
        raise IdentityError("agent_hint.parent_session_id must differ from session_id", "agent_hint.parent_session_id")
    _flag(hint, "agent_hint", "blocks_parent")
    _flag(hint, "agent_hint", "expected_resume")
    return Identity("agent_hint", parent or session, session, parent)


def from_headers(schema: HeaderSchema, session: str, headers: Mapping[str, Sequence[str]]) -> Identity:
    """One framework's headers: its session is the program; an agent or thread header names the agent
    (unnamed without one: ``agent_of_instructions``), the parent-agent header its upstream agent."""
    agent = _below(header_value(headers, schema.agent), session) if schema.agent else ""
    parent = _below(header_value(headers, schema.parent_agent), session) if schema.parent_agent else ""
    return Identity(schema.source, session, agent, parent if parent != agent else "")


def agent_of_instructions(system_prompt: str) -> str:
    """A name for an agent no convention names, from its instructions: the agents of one program differ by
    their system prompts (an Agents SDK agent's ``instructions``, a LangGraph node's system message), so
    the same agent gets the same name in every run. "" without a system prompt."""
    if not system_prompt:
        return ""
    return f"agent-{hashlib.blake2b(system_prompt.encode(), digest_size=4).hexdigest()}"
