"""Sustained calls/s and latency of router_svc or predictor_svc alone, at a steady open-loop rate.

    python -m hetflow.bench.service_load --service router --artifact DIR --rate 50 --duration 20
    python -m hetflow.bench.service_load --service predictor --artifact DIR --rate 200 --duration 20

The service runs as its own process (``hetflow serve router``/``predictor``, with ``--workers`` worker
processes) on loopback; calls are sent on a fixed schedule whatever the replies do (open loop), each
with ``--batch`` prompts or rows taken from a generated trace. A run is stable when the second half's
mean latency is within 1.25x of the first half's (no queue building up in the service).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import grpc
import yaml

from hetflow.bench.common import write
from hetflow.core.tokens import count_tokens
from hetflow.loadtest import LoadResult, run_load
from hetflow.runtime.ports import free_port
from hetflow.stackctl import wait_serving
from hetflow.v1 import predictor_pb2, predictor_pb2_grpc, router_pb2, router_pb2_grpc
from hetflow.workloads.generate import generate
from hetflow.workloads.models import DEFAULT_MODELS


def payloads(service: str, batch: int, n: int) -> list:
    records = [r for f in ("code", "math", "chat") for r in generate(f, 40, 0, DEFAULT_MODELS)]
    if service == "router":
        prompts = [r.user_prompt for r in records]
        return [router_pb2.ScoreRequest(prompts=[prompts[(i * batch + j) % len(prompts)] for j in range(batch)])
                for i in range(n)]
    rows = [predictor_pb2.FeatureRow(model=DEFAULT_MODELS[0], workflow=r.workflow, agent=r.agent,
                                     stage_index=r.stage_index, stage_count=r.stage_count,
                                     system_prompt_tokens=count_tokens(r.system_prompt),
                                     user_prompt_tokens=count_tokens(r.user_prompt),
                                     input_tokens=r.input_tokens[DEFAULT_MODELS[0]], user_prompt=r.user_prompt)
            for r in records]
    return [predictor_pb2.PredictRequest(rows=[rows[(i * batch + j) % len(rows)] for j in range(batch)],
                                         quantiles=[0.1, 0.9]) for i in range(n)]


def served_models(artifact: Path) -> list[str]:
    """The models ``artifact`` was trained for (its meta.json), which the service must be configured with;
    ``DEFAULT_MODELS`` where it names none."""
    try:
        models = json.loads((artifact / "meta.json").read_text()).get("models")
    except (OSError, ValueError):
        models = None
    return list(models) if models else list(DEFAULT_MODELS)


async def drive(address: str, service: str, requests: list, rate: float) -> LoadResult:
    async with grpc.aio.insecure_channel(address) as channel:
        method = (router_pb2_grpc.RouterStub(channel).Score if service == "router"
                  else predictor_pb2_grpc.PredictorStub(channel).Predict)
        return await run_load(lambda i: method(requests[i]), rate, duration_s=len(requests) / rate + 1,
                              max_calls=len(requests))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--service", choices=["router", "predictor"], required=True)
    parser.add_argument("--artifact", required=True)
    parser.add_argument("--rate", type=float, default=50.0, help="calls per second")
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--batch", type=int, default=1, help="prompts or rows per call")
    parser.add_argument("--precision", default="int8", help="router: int8 or fp32")
    parser.add_argument("--threads", type=int, default=1, help="router: onnxruntime threads")
    parser.add_argument("--workers", type=int, default=1, help="the service's worker processes")
    args = parser.parse_args()

    port = free_port()
    section = {"port": port, "artifact": args.artifact, "models": served_models(Path(args.artifact)),
               "workers": args.workers}
    section["kind"] = "minilm-onnx" if args.service == "router" else "qrf"
    if args.service == "router":
        section["precision"], section["threads"] = args.precision, args.threads
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "stack.yaml"
        config.write_text(yaml.safe_dump({args.service: section}))
        proc = subprocess.Popen([sys.executable, "-m", "hetflow.serve", args.service, "-c", str(config)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=os.environ.copy())
        try:
            address = f"127.0.0.1:{port}"
            if asyncio.run(wait_serving({"svc": address}, 120)) != {"svc": "SERVING"}:
                raise SystemExit(f"{args.service} did not come up")
            requests = payloads(args.service, args.batch, int(args.rate * args.duration))
            load = asyncio.run(drive(address, args.service, requests, args.rate))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    result = {
        "command": f"python -m hetflow.bench.service_load --service {args.service} --rate {args.rate:g} "
                   f"--duration {args.duration:g} --batch {args.batch} --workers {args.workers}"
                   + (f" --precision {args.precision} --threads {args.threads}" if args.service == "router" else ""),
        "offered_calls_per_s": args.rate, "batch": args.batch, **load.summary(),
    }
    errors = sum(load.errors.values())
    path = write(f"service_load_{args.service}", result)
    lat = result["latency_ms"]
    print(f"{args.service}: offered {args.rate:g}/s, achieved {result['achieved_calls_per_s']:.1f}/s, errors {errors}; "
          f"latency p50 {lat['p50']:.2f} ms, p95 {lat['p95']:.2f} ms, p99 {lat['p99']:.2f} ms; "
          f"stable={result['stability']['stable']} -> {path}")


if __name__ == "__main__":
    main()
