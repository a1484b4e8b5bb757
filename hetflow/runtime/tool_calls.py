"""Tool calling as text, in the Hermes format Qwen2.5's chat template uses (and vLLM's ``hermes`` tool
parser reads): the tools offered go into the system prompt as JSON inside ``<tools>``; the model calls
one by answering ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``; a tool's result comes
back as a user turn inside ``<tool_response>``.

hetflow's engines take text, so the HTTP doors render a request's tools, its earlier calls and their
results into its messages here, and read the calls back out of the answer; a call that is not valid
JSON with a name stays text, as vLLM's parser leaves it.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    """One function call the model made."""

    call_id: str
    name: str
    arguments: str
    """The arguments as a JSON object's text (OpenAI's ``function.arguments``)."""


@dataclass(frozen=True)
class Tool:
    """One function the model may call (OpenAI's function tool)."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] | None = None

    def schema(self) -> dict[str, Any]:
        function: dict[str, Any] = {"name": self.name, "description": self.description}
        if self.parameters is not None:
            function["parameters"] = dict(self.parameters)
        return {"type": "function", "function": function}


def tools_prompt(tools: Sequence[Tool]) -> str:
    """The system prompt's part that offers ``tools``."""
    listed = "\n".join(json.dumps(t.schema()) for t in tools)
    return ("# Tools\n\nYou may call one or more functions to help with the request.\n\n"
            f"The functions you may call, as JSON signatures in <tools></tools> tags:\n<tools>\n{listed}\n</tools>\n\n"
            "To call a function, answer with a JSON object of its name and arguments in <tool_call></tool_call> "
            'tags:\n<tool_call>\n{"name": <function-name>, "arguments": <arguments-json-object>}\n</tool_call>')


def call_text(call: ToolCall) -> str:
    """An earlier call as the model wrote it."""
    try:
        arguments = json.loads(call.arguments) if call.arguments else {}
    except ValueError:
        arguments = call.arguments
    return f"{TOOL_CALL_OPEN}\n{json.dumps({'name': call.name, 'arguments': arguments})}\n{TOOL_CALL_CLOSE}"


def assistant_text(content: str, calls: Sequence[ToolCall]) -> str:
    """An assistant turn that called tools: its text, then each call."""
    return "\n".join(part for part in (content, *(call_text(c) for c in calls)) if part)


def result_text(output: str) -> str:
    """A tool's result as the user turn that brings it back."""
    return f"<tool_response>\n{output}\n</tool_response>"


def parse_calls(text: str) -> tuple[str, list[ToolCall]]:
    """The answer's text outside its tool calls (stripped) and the calls; a block that is not a JSON object
    with a string ``name`` stays in the text."""
    calls: list[ToolCall] = []
    kept: list[str] = []
    last = 0
    for match in _CALL.finditer(text):
        call = _call(match.group(1))
        if call is None:
            continue
        kept.append(text[last:match.start()])
        last = match.end()
        calls.append(call)
    kept.append(text[last:])
    return "".join(kept).strip(), calls


def _call(body: str) -> ToolCall | None:
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("name"), str) or not parsed["name"]:
        return None
    arguments = parsed.get("arguments", {})
    return ToolCall(f"call_{uuid.uuid4().hex[:24]}", parsed["name"],
                    arguments if isinstance(arguments, str) else json.dumps(arguments))


def held_back(text: str) -> int:
    """How many characters at the end of a streamed text could begin a ``<tool_call>`` tag: held until the
    next chunk tells."""
    for n in range(min(len(text), len(TOOL_CALL_OPEN) - 1), 0, -1):
        if TOOL_CALL_OPEN.startswith(text[-n:]):
            return n
    return 0


class CallStream:
    """A streamed answer split into the text to send now and, at its end, the tool calls: text is sent as
    it comes until a ``<tool_call>`` tag begins (a possible tag's start is held for the next chunk), and
    everything from the tag on is read when the answer ends."""

    def __init__(self) -> None:
        self._pending = ""
        self._in_call = False

    def feed(self, text: str) -> str:
        """The part of the answer so far that can be sent now."""
        if self._in_call:
            self._pending += text
            return ""
        text, self._pending = self._pending + text, ""
        at = text.find(TOOL_CALL_OPEN)
        if at >= 0:
            self._in_call, self._pending = True, text[at:]
            return text[:at]
        hold = held_back(text)
        if hold:
            text, self._pending = text[:-hold], text[-hold:]
        return text

    def finish(self) -> tuple[str, list[ToolCall]]:
        """What was held: its text outside the calls, and the calls."""
        pending, self._pending = self._pending, ""
        if not self._in_call:
            return pending, []
        return parse_calls(pending)
