"""The balancer path end to end on sim engines: streaming, receipts, cancellation, deadlines, bad input."""

import asyncio
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from hetflow.client import HetflowClient, build_request
from hetflow.core.presets import apply_to_stack, resolve
from hetflow.workflows.code import run_code_workflow
from tests.integration.harness import LARGE, SMALL, stack_config, start_stack, wait_until_idle


@pytest.fixture(scope="module")
async def stack():
    s = await start_stack(stack_config())
    yield s
    await s.close()


@pytest.fixture
async def client(stack):
    async with HetflowClient(stack.address("balancer")) as c:
        yield c


async def test_four_stage_workflow_keeps_its_model_and_leaves_nothing_in_flight(stack, client):
    run = await run_code_workflow(client, "Reverse a linked list.", "plan-code-qa-code")
    models = {c.model for _, c in run.calls}
    assert len(run.calls) == 4 and len(models) == 1
    rules = [c.receipt.stages[0].rule for _, c in run.calls]
    assert rules[0].startswith("slack:") and rules[1:] == ["program-affinity"] * 3
    assert all(c.output_tokens > 0 and c.text for _, c in run.calls)
    snap = await wait_until_idle(stack)
    assert all(e.in_flight_requests == 0 and e.in_flight_tokens == 0 for e in snap.engines)
    assert stack.balancer_servicer.dispatcher.alpha_tuning is None  # the default has no eq. 4 alpha to tune


async def test_a_policy_with_eq4_records_each_program_for_hexgen_flows_alpha_tuner():
    stack = await start_stack(apply_to_stack(stack_config(), resolve("hetflow-card")))
    try:
        async with HetflowClient(stack.address("balancer")) as client:
            run = await run_code_workflow(client, "Reverse a linked list.", "plan-code-qa-code")
        await wait_until_idle(stack)
        seen = stack.balancer_servicer.dispatcher.alpha_tuning._programs[run.program_id]  # HexGen-Flow 4.3's windows
        assert len(seen.calls) == 4 and seen.finished_unix_s >= seen.start_unix_s > 0
    finally:
        await stack.close()


async def test_streaming_returns_receipt_first_and_usage_last(client):
    chunks = [c async for c in client.generate(build_request(
        prompt="count to ten", max_tokens=12, ignore_eos=True, program_id="stream-1", want_receipt=True))]
    assert chunks[0].HasField("receipt") and chunks[0].receipt.engine_id
    stages = [s.stage for s in chunks[0].receipt.stages]
    assert stages == ["model", "engine", "priority", "retention", "reserve"]
    assert chunks[-1].finished and chunks[-1].usage.output_tokens == 12 == len(chunks)
    assert not any(c.HasField("receipt") for c in chunks[1:])


async def test_concurrent_workflows_all_finish(stack, client):
    runs = await asyncio.gather(*(run_code_workflow(client, f"task {i}", v)
                                  for i, v in enumerate(["plan-code-qa-code", "plan-code", "code"] * 4)))
    assert len(runs) == 12 and all(len(r.calls) for r in runs)
    engines = {c.engine_id for r in runs for _, c in r.calls}
    assert len(engines) >= 2
    await wait_until_idle(stack)


async def test_client_cancellation_aborts_the_engine_request(stack, client):
    call = client.generate(build_request(prompt="long", max_tokens=5000, ignore_eos=True, request_id="cancel-me"))
    async for chunk in call:
        if chunk.output_tokens >= 3:
            break
    call.cancel()
    snap = await wait_until_idle(stack)
    assert all("cancel-me" not in e.status.active_request_ids for e in snap.engines)
    assert all(e.in_flight_requests == 0 for e in snap.engines)


async def test_caller_deadline_is_deadline_exceeded_and_aborts(stack, client):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.complete(build_request(prompt="long", max_tokens=5000, ignore_eos=True, request_id="late"),
                              timeout_s=0.5)
    assert err.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    snap = await wait_until_idle(stack)
    assert all("late" not in e.status.active_request_ids and e.in_flight_requests == 0 for e in snap.engines)


@pytest.mark.parametrize("kwargs, code, field", [
    (dict(prompt="hi", max_tokens=8, model_pin="gpt-17"), grpc.StatusCode.NOT_FOUND, "model_pin"),
    (dict(prompt="   ", max_tokens=8), grpc.StatusCode.INVALID_ARGUMENT, "prompt"),
    (dict(prompt="hi", max_tokens=0), grpc.StatusCode.INVALID_ARGUMENT, "max_tokens"),
    (dict(prompt="hi", max_tokens=10**9), grpc.StatusCode.INVALID_ARGUMENT, "max_tokens"),
    (dict(prompt="hi", max_tokens=8, deadline_unix_s=time.time() - 5), grpc.StatusCode.DEADLINE_EXCEEDED,
     "deadline_unix_s"),
    (dict(prompt="hi", max_tokens=8, stage_index=5, stage_count=4), grpc.StatusCode.INVALID_ARGUMENT, "stage_index"),
    (dict(messages=[("wizard", "hi")], max_tokens=8), grpc.StatusCode.INVALID_ARGUMENT, "role"),
])
async def test_bad_input_gets_a_clear_status(stack, client, kwargs, code, field):
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.complete(build_request(**kwargs))
    assert err.value.code() == code and field in err.value.details()
    snap = await stack.snapshot()
    assert all(e.in_flight_requests == 0 for e in snap.engines)


async def test_pinned_model_is_served_there(client):
    result = await client.complete(build_request(prompt="hi", max_tokens=4, model_pin=SMALL, want_receipt=True))
    assert result.model == SMALL and result.receipt.stages[0].rule == "model-pin"


async def test_health_and_reflection(stack):
    async with grpc.aio.insecure_channel(stack.address("balancer")) as ch:
        reply = await health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service="hetflow.v1.Balancer"))
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        stream = reflection_pb2_grpc.ServerReflectionStub(ch).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
        names = {s.name async for r in stream for s in r.list_services_response.service}
    assert {"hetflow.v1.Balancer", "grpc.health.v1.Health"} <= names


async def test_no_healthy_engine_for_model_is_unavailable():
    stack = await start_stack(stack_config([{"name": "small-0", "profile": f"{SMALL}@a6000"},
                                            {"name": "large-0", "profile": f"{LARGE}@a6000"}]))
    try:
        await stack.stop("large-0")   # its last report says serving=False
        async with HetflowClient(stack.address("balancer")) as client:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await client.complete(build_request(prompt="hi", max_tokens=4, model_pin=LARGE))
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            result = await client.complete(build_request(prompt="hi", max_tokens=4, program_id="x"))
            assert result.model == SMALL     # the slack rule only sees healthy models
    finally:
        await stack.close()


async def test_prompt_larger_than_kv_capacity_is_resource_exhausted():
    stack = await start_stack(stack_config([{"name": "tiny", "profile": f"{SMALL}@a6000",
                                             "model": "tiny-model"}]))
    try:
        servicer = stack.engine_servicers["tiny"]
        servicer.backend._scheduler.kv.num_blocks = 2       # 32 tokens of KV
        async with HetflowClient(stack.address("balancer")) as client:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await client.complete(build_request(prompt="word " * 100, max_tokens=4))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "KV" in err.value.details()
        assert all(e.in_flight_requests == 0 for e in (await wait_until_idle(stack)).engines)
    finally:
        await stack.close()
