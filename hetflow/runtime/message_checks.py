"""Checks every request message gets before any handler reads it: decodable, every float finite,
every string and list of a sane size. Field-specific ranges (``max_tokens``, ``kv_cache_usage``...) are
checked where each message is converted; these are the checks no field should ever fail.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message

MAX_STRING_CHARS = 16 * 2**20
"""No string field carries more than 16 Mi characters (a 1M-token prompt is ~4 Mi)."""
MAX_REPEATED = 1_000_000
"""No list field carries more than a million items (a 1M-token prompt's blocks are 62,500)."""
_FLOATS = (FieldDescriptor.CPPTYPE_FLOAT, FieldDescriptor.CPPTYPE_DOUBLE)


@dataclass(frozen=True)
class Undecodable:
    """A request whose bytes did not parse (invalid UTF-8 in a string, a broken encoding)."""

    reason: str


def lenient(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """The handler's deserializer, returning ``Undecodable`` instead of raising (gRPC would answer a
    raising deserializer with INTERNAL; the handler answers ``Undecodable`` with INVALID_ARGUMENT)."""
    if deserializer is None:
        return None

    def parse(data: bytes) -> Any:
        try:
            return deserializer(data)
        except (DecodeError, UnicodeDecodeError, ValueError) as exc:
            return Undecodable(f"{type(exc).__name__}: {exc}")

    return parse


def problem(message: Any) -> str | None:
    """The first thing wrong with a request, named by its field path; None when nothing is."""
    if isinstance(message, Undecodable):
        return f"the request could not be decoded ({message.reason})"
    if isinstance(message, Message):
        return _message_problem(message, "")
    return None


def _message_problem(message: Message, prefix: str) -> str | None:
    for field, value in message.ListFields():
        path = f"{prefix}{field.name}"
        if field.is_repeated:
            if len(value) > MAX_REPEATED:
                return f"{path} has {len(value)} items; at most {MAX_REPEATED}"
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                found = _map_problem(field, value, path)
            elif field.cpp_type == FieldDescriptor.CPPTYPE_MESSAGE or not _scalars_sane(field, value):
                found = next((p for i, item in enumerate(value) if (p := _value_problem(field, item, f"{path}[{i}]"))),
                             None)
            else:
                found = None
        else:
            found = _value_problem(field, value, path)
        if found:
            return found
    return None


def _scalars_sane(field: FieldDescriptor, values: Any) -> bool:
    """Whether every item of a repeated scalar field passes, checked in C (``map``): a prompt's block
    hashes run to thousands per request; each item is named only once one fails."""
    if field.cpp_type in _FLOATS:
        return all(map(math.isfinite, values))
    if field.cpp_type == FieldDescriptor.CPPTYPE_STRING:
        return not values or max(map(len, values)) <= MAX_STRING_CHARS
    return True  # integers, booleans and enums: every value is one


def _map_problem(field: FieldDescriptor, value: Any, path: str) -> str | None:
    value_field = field.message_type.fields_by_name["value"]
    for key, item in value.items():
        if isinstance(key, str) and len(key) > MAX_STRING_CHARS:
            return f"{path} has a key of {len(key)} characters; at most {MAX_STRING_CHARS}"
        if found := _value_problem(value_field, item, f"{path}[{key!r}]"):
            return found
    return None


def _value_problem(field: FieldDescriptor, value: Any, path: str) -> str | None:
    if field.cpp_type == FieldDescriptor.CPPTYPE_MESSAGE:
        return _message_problem(value, f"{path}.")
    if field.cpp_type in _FLOATS and not math.isfinite(value):
        return f"{path} must be a finite number, got {value}"
    if field.cpp_type == FieldDescriptor.CPPTYPE_STRING and len(value) > MAX_STRING_CHARS:
        return f"{path} has {len(value)} characters; at most {MAX_STRING_CHARS}"
    return None
