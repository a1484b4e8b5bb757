"""vLLM's own router (the pinned ``vllm-router`` binary) with Program scheduling, configured as its docs
say, in front of two simulated vLLM servers: one program's streamed calls complete through it, stay
on the program's engine (its prefix cache hits), and the router reads the servers' metrics."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import httpx
import pytest
import uvicorn

from engine_svc.vllm_sim.app import build
from engine_svc.vllm_sim.config import VllmSimConfig
from engine_svc.vllm_sim.tokenizer import PromptTokenizer
from hetflow.bench.vllm_router import agentic_context, program_scheduling_config, router_command
from hetflow.runtime.ports import free_port
from tests.factories import wait_until

pytestmark = pytest.mark.slow
MODEL = "qwen2.5-1.5b-instruct"


@pytest.fixture
async def pool():
    tokenizer = PromptTokenizer()
    servers, tasks = [], []
    for i in range(2):
        port = free_port()
        server, app = build(VllmSimConfig(f"sim-{i}", profile=f"{MODEL}@a6000"), tokenizer)
        uv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, loop="none", log_config=None,
                                           lifespan="on"))
        tasks.append(asyncio.create_task(uv.serve()))
        servers.append((server, uv, f"http://127.0.0.1:{port}"))

    async def all_started() -> bool:
        return all(uv.started for _, uv, _ in servers)

    await wait_until(all_started)  # the servers listen before the router first checks them
    yield servers
    for _, uv, _ in servers:
        uv.should_exit = True
    await asyncio.gather(*tasks)


async def test_one_programs_streamed_calls_complete_through_vllms_router_on_its_engine(pool, tmp_path: Path):
    profile = pool[0][0].profile
    config = {**program_scheduling_config(profile), "metrics_interval_seconds": 0.2}  # a short test: poll often
    port = free_port()
    log = open(tmp_path / "router.log", "wb")
    command = router_command([url for _, _, url in pool], port, free_port(), program_config=config)
    router = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=60) as client:
            async def router_up() -> bool:
                try:
                    return (await client.get("/health")).status_code == 200
                except httpx.TransportError:
                    return False

            await wait_until(router_up)
            messages = [{"role": "system", "content": "You are a careful coding agent. " * 20}]
            for step in range(3):
                messages.append({"role": "user", "content": f"step {step}: continue the patch"})
                body = {"model": MODEL, "messages": messages, "max_tokens": 8, "ignore_eos": True, "stream": True,
                        "stream_options": {"include_usage": True},
                        "vllm_xargs": agentic_context("prog-1", step)}
                async with client.stream("POST", "/v1/chat/completions", json=body) as reply:
                    assert reply.status_code == 200, await reply.aread()
                    data = [line[6:] async for line in reply.aiter_lines() if line.startswith("data: ")]
                assert data[-1] == "[DONE]" and json.loads(data[-2])["usage"]["completion_tokens"] == 8
                messages.append({"role": "assistant", "content": "patched"})

            async def ranks_observed() -> bool:
                diagnostics = (await client.get("/scheduling/diagnostics")).json()
                return "backend_observation" in json.dumps(diagnostics)

            await wait_until(ranks_observed)  # the router read the servers' /metrics
        served = [server.backend.scheduler for server, _, _ in pool]
        finished = [server.metrics.registry.get_sample_value(
            "vllm:request_success_total", {"model_name": MODEL, "engine": "0", "finished_reason": "length"})
            for server, _, _ in pool]
        assert sorted(finished) == [0.0, 3.0]  # every call of the program on its one engine
        assert max(s.prefix_hit_tokens for s in served) > 0  # so each later call found its context cached
    finally:
        router.terminate()
        router.wait(timeout=30)
        log.close()
