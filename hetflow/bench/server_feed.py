"""How full each way of feeding one tiny-model ``vllm serve`` keeps its batches (issue 34): the same burst
of calls sent three ways, one after another, against one server.

    python -m hetflow.bench.server_feed --calls 100 --rounds 2

- ``server``: every call straight to the server's ``/v1/completions`` at once (its own queue orders them);
- ``backend``: the ``vllm-server`` engine backend (``engine_svc.backends.vllm_server``) in this process,
  no service around it: its ``/tokenize``, its admission of at most ``max_num_seqs`` calls, its
  token-id prompts with ``continuous_usage_stats`` and priorities, its ``/metrics`` reads;
- ``engine``: the same backend inside hetflow's engine service, its gRPC ``Engine.Generate`` called
  straight from this process with dispatch tickets signed by the development key (security off), as a
  balancer would sign them; the stack's other services run but decide nothing;
- ``stack``: the whole stack (gateway, balancer, monitor, engine service as ``hetflow.bench.three_doors``
  starts them), the calls sent to the gateway.

The burst is fixed before any way runs: call i asks for ``20 + (37 i mod 600)`` tokens (``ignore_eos``)
after a prompt of ``5 + i mod 40`` repeats of a sentence. Per way and round: wall time, calls served per
second and calls refused (the gateway sheds load with 429; an engine refuses a ticket that expired before it
read the call), and the
server's engine steps and mean tokens per step from its ``/metrics`` (a decode step computes one token
per running sequence), so a way that lets the server's batches run empty shows as fewer tokens a step.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import httpx
import yaml

from engine_svc.backends.base import GenerateCall
from engine_svc.backends.vllm_server import VllmServerBackend
from engine_svc.config import VllmServerConfig
from hetflow import stackctl
from hetflow.bench import gateway_cost as gc
from hetflow.bench.common import chosen
from hetflow.bench.three_doors import server_counters, server_work, stack_config
from hetflow.core.call import SamplingSpec
from hetflow.core.engine.aging_queue import AgingPriorityQueue
from hetflow.runtime.ports import free_port
from hetflow.runtime.security import DEVELOPMENT_TICKET_KEY
from hetflow.runtime.tickets import TicketIssuer
from hetflow.v1 import common_pb2, engine_pb2, engine_pb2_grpc

WAYS = ("server", "backend", "engine", "stack")


def burst(calls: int) -> list[tuple[str, int]]:
    """Each call's prompt and output tokens, by a rule fixed before any way runs."""
    return [(f"Tell me a story about the number {i}. " * (5 + i % 40), 20 + (37 * i) % 600) for i in range(calls)]


async def _to_server(url: str, model: str, path: str, calls: list[tuple[str, int]]) -> int:
    """Every call at once to an OpenAI-compatible ``url``; returns how many were refused (not 200)."""
    async def one(client: httpx.AsyncClient, prompt: str, tokens: int) -> bool:
        body: dict[str, Any] = {"model": model, "max_tokens": tokens, "ignore_eos": True, "stream": True}
        body.update({"prompt": prompt} if path == "/v1/completions" else
                    {"messages": [{"role": "user", "content": prompt}]})
        async with client.stream("POST", f"{url}{path}", json=body) as reply:
            async for _ in reply.aiter_bytes():
                pass
            return reply.status_code != 200

    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=len(calls) + 8)) as client:
        return sum(await asyncio.gather(*(one(client, prompt, tokens) for prompt, tokens in calls)))


async def _to_backend(server_url: str, max_num_seqs: int, calls: list[tuple[str, int]]) -> None:
    backend = VllmServerBackend("tiny", VllmServerConfig(base_url=server_url, max_num_seqs=max_num_seqs),
                                AgingPriorityQueue(), "tiny-llama-cpu.yaml")
    await backend.start()

    async def one(i: int, prompt: str, tokens: int) -> None:
        call = GenerateCall(f"feed-{i}", prompt, (), SamplingSpec(max_tokens=tokens, ignore_eos=True), float(tokens))
        async for _ in backend.generate(call):
            pass

    try:
        await asyncio.gather(*(one(i, prompt, tokens) for i, (prompt, tokens) in enumerate(calls)))
    finally:
        await backend.close()


async def _to_engine(engine_address: str, engine_id: str, calls: list[tuple[str, int]]) -> int:
    """Every call at once to the engine service; returns how many it refused (any status but OK)."""
    issuer = TicketIssuer(DEVELOPMENT_TICKET_KEY)
    async with grpc.aio.insecure_channel(engine_address) as channel:
        engine = engine_pb2_grpc.EngineStub(channel)

        async def one(i: int, prompt: str, tokens: int) -> bool:
            request = engine_pb2.EngineGenerateRequest(
                request_id=f"feed-{time.monotonic_ns()}-{i}", prompt=prompt, priority=float(tokens),
                sampling=common_pb2.SamplingParams(max_tokens=tokens, ignore_eos=True))
            request.ticket.CopyFrom(issuer.issue(request, "", engine_id, False, time.time()))
            try:
                async for _ in engine.Generate(request):
                    pass
            except grpc.aio.AioRpcError:
                return True
            return False

        return sum(await asyncio.gather(*(one(i, prompt, tokens) for i, (prompt, tokens) in enumerate(calls))))


def run_way(way: str, server_url: str, stack: dict[str, str], max_num_seqs: int, calls: list[tuple[str, int]]
            ) -> dict[str, Any]:
    before, started, refused = server_counters(server_url), time.perf_counter(), 0
    if way == "server":
        refused = asyncio.run(_to_server(server_url, "tiny", "/v1/completions", calls))
    elif way == "backend":
        asyncio.run(_to_backend(server_url, max_num_seqs, calls))
    elif way == "engine":
        refused = asyncio.run(_to_engine(stack["engine"], stack["engine_id"], calls))
    else:
        refused = asyncio.run(_to_server(stack["gateway"], "hetflow", "/v1/chat/completions", calls))
    wall_s = time.perf_counter() - started
    return {"way": way, "wall_s": wall_s, "calls_per_s": (len(calls) - refused) / wall_s, "refused": refused,
            **server_work(before, server_counters(server_url))}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m hetflow.bench.server_feed", description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=100)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--max-num-seqs", type=int, default=8)
    p.add_argument("--stream-interval", type=int, default=1,
                   help="the engine service's stream_interval_tokens: tokens per gRPC chunk it streams")
    p.add_argument("--ways", default=",".join(WAYS))
    p.add_argument("--out", default="")
    args = p.parse_args(argv)
    ways = chosen(p, args.ways, WAYS, "way")
    out_dir = Path(args.out or tempfile.mkdtemp(prefix="server-feed-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    server = gc.start_vllm_server(port, args.max_num_seqs, 1, out_dir / "vllm-serve.log")
    server_url, stack, config = f"http://127.0.0.1:{port}", {}, None
    rows = []
    try:
        if {"engine", "stack"} & set(ways):
            config = stack_config(gc.stack_for_server(server_url, args.max_num_seqs, args.stream_interval), True,
                                  out_dir, "server-feed")
            if stackctl.up(config, 300, detach=False) != 0:
                raise RuntimeError("the stack did not start")
            raw = yaml.safe_load(config.read_text())
            stack = {"gateway": f"http://127.0.0.1:{raw['gateway']['port']}",
                     "engine": f"127.0.0.1:{raw['engines'][0]['port']}", "engine_id": raw["engines"][0]["name"]}
        calls = burst(args.calls)
        asyncio.run(_to_server(server_url, "tiny", "/v1/completions", calls[:4]))  # warm-up
        for r in range(args.rounds):
            for way in ways[r % len(ways):] + ways[:r % len(ways)]:
                rows.append({"round": r, **run_way(way, server_url, stack, args.max_num_seqs, calls)})
                row = rows[-1]
                print(f"round {r} {way:<8} {row['wall_s']:6.1f} s  {row['calls_per_s']:5.2f} calls/s  server steps "
                      f"{row['server_steps']:6.0f}  tokens/step {row['server_tokens_per_step']:5.2f}  "
                      f"refused {row['refused']}", flush=True)
    finally:
        if config is not None:
            stackctl.down(config)
        server.terminate()
        server.wait(timeout=60)
    (out_dir / "server_feed.json").write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1))
    print(f"written: {out_dir / 'server_feed.json'}")


if __name__ == "__main__":
    main()
