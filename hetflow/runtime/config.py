"""One YAML file configures a whole stack; each service reads its own section once at start-up.

Environment overrides: ``HETFLOW__<SECTION>__<FIELD>=<yaml value>`` replaces a field of a section
(``HETFLOW__BALANCER__LATENCY_SLACK=0.3``); for an engine, the section is ``ENGINES__<NAME>`` with
the engine's name upper-cased and '-' written '_' (``HETFLOW__ENGINES__SMALL_0__PORT=50200``).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Mapping, TypeVar

import yaml

ENV_PREFIX = "HETFLOW__"
T = TypeVar("T")


def _env_key(name: str) -> str:
    return name.upper().replace("-", "_")


def apply_env_overrides(raw: dict[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """Return a copy of ``raw`` with every ``HETFLOW__...`` variable applied."""
    raw = {k: (dict(v) if isinstance(v, dict) else v) for k, v in raw.items()}
    raw["engines"] = [dict(e) for e in raw.get("engines", [])]
    for key, value in environ.items():
        if not key.startswith(ENV_PREFIX):
            continue
        parts = key[len(ENV_PREFIX):].lower().split("__")
        parsed = yaml.safe_load(value)
        if parts[0] == "engines" and len(parts) == 3:
            for engine in raw["engines"]:
                if _env_key(engine.get("name", "")) == parts[1].upper():
                    engine[parts[2]] = parsed
        elif len(parts) == 2:
            raw.setdefault(parts[0], {})[parts[1]] = parsed
    return raw


def load_stack(path: str | Path, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Read the stack YAML and apply environment overrides."""
    with open(path, encoding="utf-8") as f:
        raw = yaml.safe_load(f) or {}
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: the top level must be a mapping")
    return apply_env_overrides(raw, os.environ if environ is None else environ)


def build(cls: type[T], values: Mapping[str, Any] | None, where: str) -> T:
    """Build config dataclass ``cls`` from a mapping, naming unknown keys in the error."""
    values = dict(values or {})
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise ValueError(f"{where}: unknown setting(s) {unknown}; known: {sorted(fields)}")
    kwargs = {}
    for name, value in values.items():
        ftype = fields[name].type
        if dataclasses.is_dataclass(_resolve(ftype, cls)) and isinstance(value, Mapping):
            value = build(_resolve(ftype, cls), value, f"{where}.{name}")
        kwargs[name] = value
    return cls(**kwargs)


def _resolve(ftype: Any, owner: type) -> Any:
    if isinstance(ftype, str):
        import sys

        module = sys.modules[owner.__module__]
        return getattr(module, ftype, None)
    return ftype


def engine_section(raw: Mapping[str, Any], name: str) -> dict[str, Any]:
    for engine in raw.get("engines", []):
        if engine.get("name") == name:
            return dict(engine)
    names = [e.get("name") for e in raw.get("engines", [])]
    raise ValueError(f"no engine named {name!r} in the config; engines: {names}")


SERVE_KEYS = ("host", "port", "metrics_port", "grace_s", "log_level")


def service_config(cls: type[T], section: Mapping[str, Any] | None, where: str,
                   defaults: Mapping[str, Any] | None = None) -> T:
    """Build a service config whose ``serve`` fields may sit flat in the section (``port: 50100``)."""
    values = {**(defaults or {}), **dict(section or {})}
    serve = {k: values.pop(k) for k in SERVE_KEYS if k in values}
    if serve:
        values["serve"] = {**dict(values.get("serve", {})), **serve}
    return build(cls, values, where)
