"""Scheduling overhead per call through the stack, with sim engines, at an open-loop call rate.

Overhead = the receipt's decision_ms: from the balancer receiving the call to it sending the engine
request (monitor snapshot, router, predictor, policies, admit). Reported beside the mean end-to-end
call latency, the share of that latency spent queueing in engines, and a stability check.

    python -m hetflow.bench.overhead -c examples/local-sim.yaml --rate 20 --duration 30
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from pathlib import Path
from typing import cast

from hetflow import stackctl
from hetflow.bench.common import write
from hetflow.client import CallResult, HetflowClient, build_request
from hetflow.core.stats import percentile, stability
from hetflow.runtime.config import load_stack
from hetflow.v1 import balancer_pb2
from hetflow.workflows.code import TASKS


async def drive(address: str, rate: float, duration_s: float, max_tokens: int, seed: int) -> list[CallResult]:
    rng = random.Random(seed)
    async with HetflowClient(address) as client:
        tasks: list[asyncio.Task[CallResult]] = []
        end = time.perf_counter() + duration_s
        while time.perf_counter() < end:
            request = build_request([("user", rng.choice(TASKS))], max_tokens=rng.randint(max_tokens // 4, max_tokens),
                                    ignore_eos=True, program_id=f"bench-{len(tasks)}", workflow="bench",
                                    want_receipt=True)
            tasks.append(asyncio.create_task(client.complete(request, timeout_s=120)))
            await asyncio.sleep(rng.expovariate(rate))
        return list(await asyncio.gather(*tasks))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-c", "--config", default="examples/local-sim.yaml", type=Path)
    parser.add_argument("--rate", type=float, default=20.0, help="calls per second (Poisson)")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of arrivals")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    raw = load_stack(args.config)
    started = stackctl.read_state(raw) is None
    if started and stackctl.up(args.config, 240, detach=False) != 0:
        raise SystemExit(1)
    try:
        address = f"{raw['stack'].get('host', '127.0.0.1')}:{raw['balancer']['port']}"
        results = asyncio.run(drive(address, args.rate, args.duration, args.max_tokens, args.seed))
    finally:
        if started:
            stackctl.down(args.config)

    decision_ms = [cast(balancer_pb2.Receipt, r.receipt).decision_ms for r in results]
    latency_s = [r.latency_s for r in results]
    mean_latency_ms = statistics.mean(latency_s) * 1e3
    result = {
        "command": f"python -m hetflow.bench.overhead -c {args.config} --rate {args.rate:g} "
                   f"--duration {args.duration:g}",
        "calls": len(results), "rate_per_s": args.rate,
        "decision_ms": {"p50": percentile(decision_ms, 0.5), "p99": percentile(decision_ms, 0.99),
                        "mean": statistics.mean(decision_ms)},
        "call_latency_ms": {"mean": mean_latency_ms, "p50": percentile(latency_s, 0.5) * 1e3,
                            "p99": percentile(latency_s, 0.99) * 1e3},
        "overhead_share_of_mean_latency": statistics.mean(decision_ms) / mean_latency_ms,
        "queueing_share": sum(r.queued_s for r in results) / sum(latency_s),
        "stability": stability(latency_s),
    }
    path = write("overhead", result)
    d, c = result["decision_ms"], result["call_latency_ms"]
    print(f"{len(results)} calls at {args.rate:g}/s: decision p50 {d['p50']:.2f} ms, p99 {d['p99']:.2f} ms; "
          f"call latency mean {c['mean']:.0f} ms (overhead {100 * result['overhead_share_of_mean_latency']:.2f}%); "
          f"queueing share {100 * result['queueing_share']:.1f}%; "
          f"stable={result['stability']['stable']} (halves ratio {result['stability']['ratio']:.2f}) -> {path}")


if __name__ == "__main__":
    main()
