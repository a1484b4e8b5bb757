"""Every RPC of every service, fed messages hypothesis builds from the contracts (NaN, infinities,
negatives, huge numbers, odd text, random bytes): each answer is OK or a clear status, never INTERNAL
or UNKNOWN, and the stack still serves a plain call afterwards (issue 14)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Iterator

import grpc
import pytest
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetflow.client import build_request
from hetflow.runtime.security import DEVELOPMENT_TICKET_KEY
from hetflow.runtime.tickets import TicketIssuer
from hetflow.v1 import balancer_pb2, engine_pb2, monitor_pb2, predictor_pb2, router_pb2
from tests.integration.harness import Stack, stack_config, start_stack

pytestmark = pytest.mark.slow
CLEAR = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
         grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
         grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.ALREADY_EXISTS,
         grpc.StatusCode.UNIMPLEMENTED}
"""PERMISSION_DENIED, FAILED_PRECONDITION and ALREADY_EXISTS are the dispatch tickets' (issue 34): a fuzzed
engine request's ticket is forged unless the test signs it, which half the examples do so that the
request's own checks are reached too. UNIMPLEMENTED: ``Engine.Hold`` on this stack's engine, which has no
model server (its messages are checked on a ``vllm-server`` engine, tests/integration/test_model_server_path.py)."""
SERVICES = {"balancer": balancer_pb2, "small-0": engine_pb2, "router": router_pb2, "predictor": predictor_pb2,
            "monitor": monitor_pb2}
"""In this order: the monitor last, since calls any client may make to it (admits of programs no balancer
will release, reports of engines that do not exist) weigh on every decision until it forgets them."""
CALL_TIMEOUT_S = 0.5
"""Each fuzzed call's deadline: a valid-looking Generate may stream for minutes otherwise."""

_INTS = {FieldDescriptor.CPPTYPE_INT32: (-2**31, 2**31 - 1), FieldDescriptor.CPPTYPE_INT64: (-2**63, 2**63 - 1),
         FieldDescriptor.CPPTYPE_UINT32: (0, 2**32 - 1), FieldDescriptor.CPPTYPE_UINT64: (0, 2**64 - 1)}


def _scalar(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    if field.cpp_type in (FieldDescriptor.CPPTYPE_DOUBLE, FieldDescriptor.CPPTYPE_FLOAT):
        double = field.cpp_type == FieldDescriptor.CPPTYPE_DOUBLE
        edges = st.sampled_from([0.0, -1.0, 1e12, -1e300, 1e308] if double else [0.0, -1.0, 3.0e38, -3.0e38])
        return st.floats(allow_nan=True, allow_infinity=True, width=64 if double else 32) | edges
    if field.cpp_type in _INTS:
        low, high = _INTS[field.cpp_type]
        return st.integers(low, high) | st.sampled_from([low, high, 0, 1])
    if field.cpp_type == FieldDescriptor.CPPTYPE_BOOL:
        return st.booleans()
    if field.cpp_type == FieldDescriptor.CPPTYPE_ENUM:
        return st.sampled_from([v.number for v in field.enum_type.values])
    if field.type == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=32)
    return st.text(max_size=24) | st.sampled_from(["", "small-0", "qwen2.5-1.5b-instruct", "user", "x" * 5000])


def messages(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy[Any]:
    """Messages of ``descriptor`` with a random subset of fields set to random, often hostile, values."""
    cls = message_factory.GetMessageClass(descriptor)
    fields = {}
    for field in descriptor.fields:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            key, value = field.message_type.fields_by_name["key"], field.message_type.fields_by_name["value"]
            fields[field.name] = st.dictionaries(_scalar(key), _scalar(value), max_size=3)
        elif field.message_type is not None:
            if depth >= 2:
                continue
            inner = messages(field.message_type, depth + 1)
            fields[field.name] = st.lists(inner, max_size=3) if field.is_repeated else inner
        else:
            fields[field.name] = st.lists(_scalar(field), max_size=4) if field.is_repeated else _scalar(field)

    @st.composite
    def build(draw: st.DrawFn) -> Any:
        msg = cls()
        for name in draw(st.lists(st.sampled_from(sorted(fields)), unique=True)) if fields else []:
            value = draw(fields[name])
            target = getattr(msg, name)
            if isinstance(value, dict):
                for k, v in value.items():
                    if hasattr(target[k], "CopyFrom"):
                        target[k].CopyFrom(v)
                    else:
                        target[k] = v
            elif isinstance(value, list):
                target.extend(value)
            elif hasattr(target, "CopyFrom"):
                target.CopyFrom(value)
            else:
                setattr(msg, name, value)
        return msg

    return build()


def _methods() -> Iterator[tuple[str, MethodDescriptor]]:
    for server, module in SERVICES.items():
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                yield server, method


METHODS = list(_methods())


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    """A live stack on a loop of its own thread, so hypothesis's synchronous tests can call it."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    raw = stack_config([{"name": "small-0", "profile": "qwen2.5-1.5b-instruct@a6000"}])
    raw["monitor"].update(orphan_grace_s=1.0, program_idle_after_s=1.0, engine_failed_after_s=2.0)
    running = asyncio.run_coroutine_threadsafe(start_stack(raw), loop).result(60)
    yield running
    asyncio.run_coroutine_threadsafe(running.close(), loop).result(60)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def _status(channel: grpc.Channel, method: MethodDescriptor, payload: bytes) -> grpc.StatusCode:
    path = f"/{method.containing_service.full_name}/{method.name}"
    try:
        if method.client_streaming:
            for _ in channel.stream_stream(path)(iter([payload]), timeout=CALL_TIMEOUT_S):
                pass
        elif method.server_streaming:
            for _ in channel.unary_stream(path)(payload, timeout=CALL_TIMEOUT_S):
                pass
        else:
            channel.unary_unary(path)(payload, timeout=CALL_TIMEOUT_S)
    except grpc.RpcError as exc:
        return exc.code()  # type: ignore[attr-defined,no-any-return]
    return grpc.StatusCode.OK


@pytest.mark.parametrize("server, method", METHODS, ids=[f"{s}:{m.name}" for s, m in METHODS])
def test_fuzzed_messages_get_a_clear_status(stack: Stack, server: str, method: MethodDescriptor):
    with grpc.insecure_channel(stack.address(server)) as channel:
        @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(messages(method.input_type), st.booleans())
        def fuzz(msg: Any, signed: bool) -> None:
            if signed and method.full_name == "hetflow.v1.Engine.Generate":
                msg.ticket.CopyFrom(TicketIssuer(DEVELOPMENT_TICKET_KEY).issue(msg, "", server, False, time.time()))
            assert _status(channel, method, msg.SerializeToString()) in CLEAR

        fuzz()


@pytest.mark.parametrize("server, method", METHODS, ids=[f"{s}:{m.name}" for s, m in METHODS])
def test_random_bytes_get_a_clear_status(stack: Stack, server: str, method: MethodDescriptor):
    with grpc.insecure_channel(stack.address(server)) as channel:
        @settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        @given(st.binary(max_size=64))
        def fuzz(payload: bytes) -> None:
            assert _status(channel, method, payload) in CLEAR

        fuzz()


def test_the_stack_still_serves_after_the_fuzzing(stack: Stack):
    with grpc.insecure_channel(stack.address("balancer")) as channel:
        reply = channel.unary_unary("/hetflow.v1.Balancer/Complete", response_deserializer=(
            balancer_pb2.CompletionReply.FromString))(
            build_request(prompt="still there?", max_tokens=4).SerializeToString(), timeout=30)
    assert reply.usage.output_tokens == 4
