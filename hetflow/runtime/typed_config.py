"""A config dataclass built from a mapping (a section of the stack's YAML), unknown keys named in the error."""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, Mapping, TypeVar

T = TypeVar("T")


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
        module = sys.modules[owner.__module__]
        return getattr(module, ftype, None)
    return ftype
