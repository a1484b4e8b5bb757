"""Does a simulated vLLM server keep its profile's time on this host? An idle request's time to first
token and inter-token time, seen by a streaming client, against what the profile says (issue 33: within
5%).

    python -m hetflow.bench.vllm_sim_timing --profile qwen2.5-7b-instruct@h100-80g --time-scale 10

The server runs in this process on a free port; each request is alone (the one before it finished), its
prompt new token ids (no prefix hit), its output ``--output-tokens`` with ``ignore_eos``. Expected:
the prompt's prefill iterations (chunks of the token budget), then one decode iteration per further
token at the growing context, each the profile's time times the time scale.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from typing import Any

import httpx

from hetflow.bench.common import machine
from hetflow.core.engine.profile import EngineProfile, load_profile
from hetflow.runtime.ports import free_port


def expected_s(profile: EngineProfile, prompt_tokens: int, output_tokens: int, time_scale: float
               ) -> tuple[float, float]:
    """The profile's time to first token and mean inter-token time for one request alone."""
    ttft = profile.isolated_request_s(prompt_tokens, 1)
    whole = profile.isolated_request_s(prompt_tokens, output_tokens)
    return ttft * time_scale, (whole - ttft) / (output_tokens - 1) * time_scale


async def measure(url: str, prompt_tokens: int, output_tokens: int, repeats: int) -> list[tuple[float, float]]:
    """Each request's time to first token and mean inter-token time, seen by the client."""
    out = []
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        for i in range(repeats):
            prompt = [3 + (i * 7919 + k) % 1500 for k in range(prompt_tokens)]  # new ids each request
            body = {"prompt": prompt, "max_tokens": output_tokens, "ignore_eos": True, "stream": True,
                    "stream_options": {"include_usage": True}}
            sent, times, tokens = time.perf_counter(), [], 0
            async with client.stream("POST", "/v1/completions", json=body) as reply:
                async for line in reply.aiter_lines():
                    if not line.startswith("data: {"):
                        continue
                    chunk = json.loads(line[6:])
                    if chunk["choices"]:
                        times.append(time.perf_counter())
                    else:  # the usage chunk: how many tokens the chunks carried (several, when coalesced)
                        tokens = chunk["usage"]["completion_tokens"]
            out.append((times[0] - sent, (times[-1] - times[0]) / (tokens - 1)))
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    import uvicorn

    from engine_svc.vllm_sim.app import build
    from engine_svc.vllm_sim.config import VllmSimConfig

    port = free_port()
    server, app = build(VllmSimConfig("timing", profile=args.profile, time_scale=args.time_scale))
    uv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, loop="none", log_config=None,
                                       lifespan="on"))
    serving = asyncio.create_task(uv.serve())
    while not uv.started:
        await asyncio.sleep(0.05)
    try:
        seen = await measure(f"http://127.0.0.1:{port}", args.prompt_tokens, args.output_tokens, args.repeats)
    finally:
        uv.should_exit = True
        await serving
    ttft, itl = expected_s(server.profile, args.prompt_tokens, args.output_tokens, args.time_scale)
    ttft_seen = statistics.median(t for t, _ in seen)
    itl_seen = statistics.median(g for _, g in seen)
    return {"command": "python -m hetflow.bench.vllm_sim_timing " + " ".join(sys.argv[1:]), "machine": machine(),
            "profile": args.profile, "time_scale": args.time_scale, "prompt_tokens": args.prompt_tokens,
            "output_tokens": args.output_tokens, "repeats": args.repeats,
            "ttft_s": {"profile": ttft, "median_seen": ttft_seen, "error": ttft_seen / ttft - 1},
            "inter_token_s": {"profile": itl, "median_seen": itl_seen, "error": itl_seen / itl - 1},
            "within_5_percent": abs(ttft_seen / ttft - 1) <= 0.05 and abs(itl_seen / itl - 1) <= 0.05}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hetflow.bench.vllm_sim_timing", description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", default="qwen2.5-7b-instruct@h100-80g")
    p.add_argument("--time-scale", type=float, default=10.0)
    p.add_argument("--prompt-tokens", type=int, default=1024)
    p.add_argument("--output-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    load_profile(args.profile)  # a bad name fails before the server starts
    result = asyncio.run(run(args))
    print(json.dumps(result, indent=1))
    return 0 if result["within_5_percent"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
