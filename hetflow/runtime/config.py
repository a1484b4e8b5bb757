"""One YAML file configures a whole stack; each service reads its own section once at start-up.

Environment overrides: ``HETFLOW__<SECTION>__<FIELD>=<yaml value>`` replaces a field of a section
(``HETFLOW__BALANCER__MAX_TOKENS_LIMIT=8192``), at any depth (``HETFLOW__BALANCER__POLICY__MODEL=chimera``);
for an engine, the section is ``ENGINES__<NAME>`` with the engine's name upper-cased and '-' written
'_' (``HETFLOW__ENGINES__SMALL_0__PORT=50200``, ``HETFLOW__ENGINES__SMALL_0__VLLM__MAX_NUM_SEQS=64``).
"""

from __future__ import annotations

import copy
import difflib
import os
from dataclasses import fields
from pathlib import Path
from typing import Any, Mapping, TypeVar

import yaml

from hetflow.runtime.server import ServeConfig
from hetflow.runtime.typed_config import build

ENV_PREFIX = "HETFLOW__"
T = TypeVar("T")


SECTIONS = ("stack", "security", "monitor", "router", "predictor", "balancer", "gateway", "engines", "vllm_sim")
"""The top-level sections a stack config may have."""


def env_key(name: str) -> str:
    return name.upper().replace("-", "_")


def check_sections(raw: Mapping[str, Any], where: str) -> None:
    """A misspelled section is an error naming it, not a section no service reads."""
    unknown = sorted(set(raw) - set(SECTIONS))
    if unknown:
        hints = [f"{u!r} (did you mean {close[0]!r}?)" if (close := difflib.get_close_matches(u, SECTIONS, 1))
                 else repr(u) for u in unknown]
        raise ValueError(f"{where}: unknown section(s) {', '.join(hints)}; known: {list(SECTIONS)}")


def _set_nested(target: dict[str, Any], path: list[str], value: Any, key: str) -> None:
    for i, name in enumerate(path[:-1]):
        child = target.setdefault(name, {})
        if not isinstance(child, dict):
            raise ValueError(f"{key}: {'.'.join(path[:i + 1])} is {child!r}, not a section it can set a field in")
        target = child
    target[path[-1]] = value


def apply_env_overrides(raw: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """Return a copy of ``raw`` with every ``HETFLOW__...`` variable applied, at any depth
    (``HETFLOW__BALANCER__POLICY__MODEL``, ``HETFLOW__ENGINES__SMALL_0__VLLM__MAX_NUM_SEQS``); a variable
    naming no section or no engine is an error."""
    raw = copy.deepcopy(raw)
    raw["engines"] = list(raw.get("engines") or [])
    for key, value in sorted(environ.items()):
        if not key.startswith(ENV_PREFIX):
            continue
        parts = key[len(ENV_PREFIX):].lower().split("__")
        if len(parts) < 2 or not all(parts) or (parts[0] == "engines" and len(parts) < 3):
            raise ValueError(f"{key}: expected HETFLOW__<SECTION>__<FIELD>[__<FIELD>...] or "
                             "HETFLOW__ENGINES__<NAME>__<FIELD>[__<FIELD>...]")
        if parts[0] not in SECTIONS:
            raise ValueError(f"{key}: unknown section {parts[0]!r}; known: {list(SECTIONS)}")
        parsed = yaml.safe_load(value)
        if parts[0] == "engines":
            matches = [e for e in raw["engines"] if env_key(str(e.get("name", ""))) == parts[1].upper()]
            if not matches:
                raise ValueError(f"{key}: no engine named {parts[1]!r} (names upper-cased, '-' as '_'); engines: "
                                 f"{[e.get('name') for e in raw['engines']]}")
            _set_nested(matches[0], parts[2:], parsed, key)
        else:
            section = raw.setdefault(parts[0], {})
            if not isinstance(section, dict):
                raise ValueError(f"{key}: section {parts[0]} is {section!r}, not a mapping")
            _set_nested(section, parts[1:], parsed, key)
    return raw


def load_stack(path: str | Path, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Read the stack YAML, check its sections and apply environment overrides."""
    try:
        with open(path, encoding="utf-8") as f:
            raw = yaml.safe_load(f) or {}
    except FileNotFoundError as exc:
        raise ValueError(f"no stack config at {path}") from exc
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: the top level must be a mapping")
    check_sections(raw, str(path))
    return apply_env_overrides(raw, os.environ if environ is None else environ)


def engine_section(raw: Mapping[str, Any], name: str) -> dict[str, Any]:
    for engine in raw.get("engines", []):
        if engine.get("name") == name:
            return dict(engine)
    names = [e.get("name") for e in raw.get("engines", [])]
    raise ValueError(f"no engine named {name!r} in the config; engines: {names}")


SERVE_KEYS = tuple(f.name for f in fields(ServeConfig))
"""A service section's keys that are its ``serve`` settings (they may sit flat in the section)."""


def stack_defaults(raw: Mapping[str, Any], identity: str) -> dict[str, Any]:
    """What every service takes from the stack as a whole: its host, and the stack's ``security``
    section as this service (``identity``) uses it."""
    from hetflow.runtime.security import stack_security

    return {"host": raw.get("stack", {}).get("host", "127.0.0.1"), "security": stack_security(raw, identity)}


def service_config(cls: type[T], section: Mapping[str, Any] | None, where: str,
                   defaults: Mapping[str, Any] | None = None) -> T:
    """Build a service config whose ``serve`` fields may sit flat in the section (``port: 50100``) or
    under ``serve``; ``defaults`` likewise, the section's winning field by field."""
    defaults, section = dict(defaults or {}), dict(section or {})
    serve = {**serve_fields(defaults), **serve_fields(section)}
    values = {**defaults, **section}
    if serve:
        values["serve"] = serve
    return build(cls, values, where)


def serve_fields(values: dict[str, Any]) -> dict[str, Any]:
    """The ``serve`` fields of a section (or defaults), taken out of it: those under ``serve``, then the
    flat ones over them (as ``service_config`` builds them; the supervisor reads a section's drain so)."""
    flat = {k: values.pop(k) for k in SERVE_KEYS if k in values}
    return {**dict(values.pop("serve", None) or {}), **flat}
