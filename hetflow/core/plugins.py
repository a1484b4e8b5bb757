"""One registry for every pluggable kind, chosen by type name in configuration (STYLE.md: a plugin's
type string, class and file agree).

Kinds: the balancer's five stages (``model-picker``, ``engine-picker``, ``priority-rule``,
``retention-rule``, ``reserve-rule``; the
``scored`` engine picker is made of ``engine-filter`` and ``engine-scorer`` plugins), the engine's
queue (``engine-queue``) and backend (``engine-backend``), the router's scorer (``router-scorer``) and
the predictor (``predictor``). A plugin registers itself with ``@plugin(kind, name)`` when its module is
imported; one with heavy dependencies (vLLM, onnxruntime) is ``declare``d by import path and imported
only when built. Every default value lives in one place: the plugin's constructor. ``build`` passes the
configured parameters and nothing else, so a parameter left out is the plugin's own default.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable, Mapping, TypeVar

KINDS = ("model-picker", "engine-picker", "engine-filter", "engine-scorer", "priority-rule", "retention-rule",
         "reserve-rule", "engine-queue",
         "engine-backend", "router-scorer", "predictor")
_REGISTRY: dict[str, dict[str, type | str]] = {kind: {} for kind in KINDS}
_BUILT_IN = {"model-picker": "hetflow.core.policies.builtins", "engine-picker": "hetflow.core.policies.builtins",
             "engine-filter": "hetflow.core.policies.builtins", "engine-scorer": "hetflow.core.policies.builtins",
             "priority-rule": "hetflow.core.policies.builtins", "retention-rule": "hetflow.core.policies.builtins",
             "reserve-rule": "hetflow.core.policies.builtins",
             "engine-queue": "hetflow.core.engine.queues"}
"""The core module whose import registers a kind's built-in plugins; a service registers its own
kinds' plugins when its package is imported."""
T = TypeVar("T", bound=type)


def plugin(kind: str, name: str) -> Callable[[T], T]:
    """Class decorator: register ``cls`` as plugin ``name`` of ``kind`` and set its ``type_name``."""
    def add(cls: T) -> T:
        _check(kind, name, cls)
        cls.type_name = name  # type: ignore[attr-defined]
        _REGISTRY[kind][name] = cls
        return cls

    return add


def declare(kind: str, name: str, target: str) -> None:
    """Register ``module:Class`` as plugin ``name`` of ``kind`` without importing it yet."""
    _check(kind, name, target)
    _REGISTRY[kind][name] = target


def names(kind: str) -> list[str]:
    return sorted(_kinds(kind))


def plugin_class(kind: str, name: str) -> type:
    registered = _kinds(kind)
    if name not in registered:
        raise ValueError(f"unknown {kind} {name!r}; known: {sorted(registered)}")
    target = registered[name]
    if isinstance(target, str):
        module, _, attr = target.partition(":")
        cls = getattr(importlib.import_module(module), attr)
        cls.type_name = name
        registered[name] = target = cls
    return target


def defaults(kind: str, name: str) -> dict[str, Any]:
    """The plugin's parameters with their defaults, as its constructor writes them."""
    params = inspect.signature(plugin_class(kind, name)).parameters
    return {p.name: p.default for p in params.values()
            if p.default is not inspect.Parameter.empty and p.kind is not inspect.Parameter.VAR_KEYWORD}


def build(kind: str, name: str, params: Mapping[str, Any] | None = None, **context: Any) -> Any:
    """An instance of plugin ``name`` of ``kind``: ``params`` from configuration (unknown ones are a
    ValueError naming the known ones), ``context`` what the caller wires in (a profile, a queue)."""
    cls = plugin_class(kind, name)
    params = dict(params or {})
    accepted = inspect.signature(cls).parameters
    unknown = sorted(set(params) - set(accepted))
    if unknown and not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values()):
        raise ValueError(f"{kind} {name!r} has no parameter(s) {unknown}; it takes {sorted(defaults(kind, name))}")
    missing = sorted(p.name for p in accepted.values() if p.default is inspect.Parameter.empty
                     and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
                     and p.name not in params and p.name not in context)
    if missing:
        raise ValueError(f"{kind} {name!r} needs {missing}")
    return cls(**context, **params)


def _kinds(kind: str) -> dict[str, type | str]:
    if kind not in _REGISTRY:
        raise ValueError(f"unknown plugin kind {kind!r}; kinds: {list(KINDS)}")
    if kind in _BUILT_IN:
        importlib.import_module(_BUILT_IN[kind])
    return _REGISTRY[kind]


def _check(kind: str, name: str, target: object) -> None:
    if kind not in _REGISTRY:
        raise ValueError(f"unknown plugin kind {kind!r}; kinds: {list(KINDS)}")
    existing = _REGISTRY[kind].get(name)
    if existing is not None and existing is not target:
        raise ValueError(f"{kind} {name!r} is registered twice")
