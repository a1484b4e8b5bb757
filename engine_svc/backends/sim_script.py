"""Scripted answers for the ``sim`` backend: a list of rules, each a pattern over the call's system
prompt and its last message and the answer to give when both match. Agent frameworks then take their
real paths through a simulated stack: an answer can call a tool or hand off (``<tool_call>`` text in
the Hermes format, ``hetflow.runtime.tool_calls``), and a call no rule matches gets the sim's filler.

The file (``engines[].sim_script``), YAML::

    - when: {system: "triage agent", last: "fix the bug"}   # regexes, searched; either may be left out
      reply: '<tool_call>{"name": "transfer_to_coder", "arguments": {}}</tool_call>'
    - when: {system: "coder"}
      reply: "def add(a, b): return a + b"

The first rule that matches answers. The answer streams one whitespace-led word a token; a call whose
``max_tokens`` is shorter gets its first words and finish reason ``length``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import yaml

WHEN_FIELDS = ("system", "last")


@dataclass(frozen=True)
class ScriptRule:
    system: re.Pattern[str] | None
    last: re.Pattern[str] | None
    reply: str

    def matches(self, system: str, last: str) -> bool:
        return (self.system is None or bool(self.system.search(system))) and \
            (self.last is None or bool(self.last.search(last)))


@dataclass(frozen=True)
class SimScript:
    rules: tuple[ScriptRule, ...]

    def reply_for(self, messages: Sequence[tuple[str, str]], prompt: str = "") -> str | None:
        """The first matching rule's answer for a chat call (or a prompt, read as its last message)."""
        system = "\n".join(content for role, content in messages if role == "system")
        last = messages[-1][1] if messages else prompt
        return next((rule.reply for rule in self.rules if rule.matches(system, last)), None)


def answer_tokens(reply: str) -> list[str]:
    """The answer as the tokens it streams in: each word with the whitespace before it."""
    return re.findall(r"\s*\S+", reply) or [reply]


def _pattern(when: dict[str, Any], name: str, where: str) -> re.Pattern[str] | None:
    if when.get(name) is None:
        return None
    try:
        return re.compile(str(when[name]))
    except re.error as exc:
        raise ValueError(f"{where}.when.{name} is not a regex: {exc}") from exc


def parse_script(raw: Any, source: str) -> SimScript:
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{source}: a sim script is a non-empty list of {{when, reply}} rules")
    rules = []
    for i, entry in enumerate(raw):
        where = f"{source}[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("reply"), str):
            raise ValueError(f"{where} needs a reply string")
        when = entry.get("when") or {}
        if not isinstance(when, dict) or set(when) - set(WHEN_FIELDS):
            raise ValueError(f"{where}.when takes {list(WHEN_FIELDS)}, got {when!r}")
        rules.append(ScriptRule(_pattern(when, "system", where), _pattern(when, "last", where), entry["reply"]))
    return SimScript(tuple(rules))


def load_script(path: str) -> SimScript:
    return parse_script(yaml.safe_load(Path(path).read_text()), path)
