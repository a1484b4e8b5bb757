"""Every request is checked before a handler reads it: undecodable bytes and non-finite numbers are
INVALID_ARGUMENT naming the field, never INTERNAL."""

from __future__ import annotations

import math

import grpc
import pytest

from hetflow.runtime.message_checks import MAX_STRING_CHARS, Undecodable, lenient, problem
from hetflow.runtime.server import ServeConfig, start
from hetflow.v1 import common_pb2, monitor_pb2, predictor_pb2
from monitor_svc import app
from monitor_svc.config import MonitorConfig
from tests.factories import free_port


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_non_finite_float_is_named_by_its_path(value: float):
    msg = monitor_pb2.AdmitRequest(request_id="r", workflow=common_pb2.WorkflowMeta(deadline_unix_s=value))
    assert problem(msg) == f"workflow.deadline_unix_s must be a finite number, got {value}"


def test_non_finite_floats_in_lists_and_maps_are_found():
    status = common_pb2.EngineStatus(engine_id="e", profile=common_pb2.TimingProfile(prefill_ms_per_token=math.nan))
    assert problem(status) == "profile.prefill_ms_per_token must be a finite number, got nan"
    prediction = predictor_pb2.Prediction(quantile_tokens=[1.0, math.inf])
    assert problem(prediction) == "quantile_tokens[1] must be a finite number, got inf"


def test_the_first_bad_item_of_a_long_list_is_named():
    """Long scalar lists are checked whole; the path names the first item that fails."""
    values = [1.0] * 5000
    values[3001] = values[4000] = -math.inf
    assert (problem(predictor_pb2.Prediction(quantile_tokens=values))
            == "quantile_tokens[3001] must be a finite number, got -inf")
    tags = ["ok"] * 100 + ["x" * (MAX_STRING_CHARS + 1)]
    assert problem(monitor_pb2.SnapshotRequest(prefix_blocks=range(5000))) is None
    assert (problem(common_pb2.EngineStatus(engine_id="e", active_request_ids=tags))
            == f"active_request_ids[100] has {MAX_STRING_CHARS + 1} characters; at most {MAX_STRING_CHARS}")


def test_sane_messages_and_huge_strings():
    assert problem(monitor_pb2.AdmitRequest(request_id="r", predicted_tokens=12.5, expected_s=3.0)) is None
    assert "at most" in (problem(monitor_pb2.AdmitRequest(request_id="x" * (MAX_STRING_CHARS + 1))) or "")


def test_undecodable_bytes_become_a_problem_not_an_exception():
    parse = lenient(monitor_pb2.AdmitRequest.FromString)
    assert parse is not None
    parsed = parse(b"\x0a\x02\xff\xfe")  # field 1 (request_id), 2 bytes of invalid UTF-8
    assert isinstance(parsed, Undecodable) and "decoded" in (problem(parsed) or "")


async def test_a_live_service_answers_invalid_argument_for_both():
    cfg = MonitorConfig(serve=ServeConfig(port=free_port(), not_serving_s=0.0))
    _, setup = app.build(cfg)
    server = await start("monitor", cfg.serve, *(await setup()))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            raw = channel.unary_unary("/hetflow.v1.Monitor/Admit")
            with pytest.raises(grpc.aio.AioRpcError) as bad_bytes:
                await raw(b"\x0a\x02\xff\xfe", timeout=5)
            assert bad_bytes.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            nan = monitor_pb2.AdmitRequest(request_id="r", engine_id="e", expected_s=math.nan)
            with pytest.raises(grpc.aio.AioRpcError) as bad_number:
                await raw(nan.SerializeToString(), timeout=5)
            assert bad_number.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "expected_s" in (bad_number.value.details() or "")
    finally:
        await server.stop()
