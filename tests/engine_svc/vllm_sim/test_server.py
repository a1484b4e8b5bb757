"""The simulated server on a real socket and clock: a client that disconnects mid-stream, or gives up on a
whole answer, leaves nothing running in the engine, and the server goes on serving."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import uvicorn

from engine_svc.vllm_sim.app import build
from engine_svc.vllm_sim.config import VllmSimConfig
from engine_svc.vllm_sim.tokenizer import PromptTokenizer
from hetflow.runtime.ports import free_port
from tests.factories import wait_until

pytestmark = pytest.mark.slow


async def test_a_client_that_leaves_mid_stream_frees_its_request():
    port = free_port()
    # 1.5B on an A6000 slowed 20x: each decode iteration some 0.2 s, so the stream outlives the client.
    server, app = build(VllmSimConfig("sim-0", profile="qwen2.5-1.5b-instruct@a6000", time_scale=20.0),
                        PromptTokenizer())
    uv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, loop="none", log_config=None,
                                       lifespan="on"))
    serving = asyncio.create_task(uv.serve())
    await wait_until(lambda: uv.started)
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            body = {"prompt": "write a long story", "max_tokens": 400, "ignore_eos": True, "stream": True}
            async with client.stream("POST", "/v1/completions", json=body) as reply:
                assert reply.status_code == 200
                seen = 0
                async for line in reply.aiter_lines():
                    seen += line.startswith("data: ")
                    if seen == 2:
                        break  # the client leaves with the request running
            await wait_until(lambda: not server.backend.scheduler.requests)
            assert server.backend.scheduler.kv.used_blocks == 0
            generated = server.metrics.registry.get_sample_value(
                "vllm:generation_tokens_total", {"model_name": "qwen2.5-1.5b-instruct", "engine": "0"})
            assert generated < 400  # aborted, not run to its end
            with pytest.raises(httpx.ReadTimeout):  # a whole (not streamed) request whose client gives up
                await client.post("/v1/completions", json={**body, "stream": False}, timeout=1.0)
            await wait_until(lambda: not server.backend.scheduler.requests)  # aborted too, as vLLM does
            after = await client.post("/v1/completions", json={"prompt": "x", "max_tokens": 2, "ignore_eos": True})
            assert after.status_code == 200 and after.json()["usage"]["completion_tokens"] == 2
    finally:
        uv.should_exit = True
        await serving
