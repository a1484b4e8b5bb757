"""Decisions per second of one balancer process (issue 34): the example stack's monitor, router, predictor
and balancer over 16 simulated engines, every service a process of its own, driven by a load client of
several processes that ask for decisions (``Balancer.Decide``, or ``Balancer.DecideStream`` with
``--decide-on stream``: each client's decisions on one stream) at a fixed open-loop rate and stream each
decided call (one token) from its engine, as the direct path does.

    python -m hetflow.bench.decision_rate --rates 100,200,400,800 --duration 20 --clients 4 \
        [--context-tokens 4000] [--decide-on stream]

Each call asks for its receipt, whose ``decision_ms`` the balancer measures itself, from the call
received to the decision returned (the admit included); p50 and p99 are over the calls decided in the
window. Beside them: calls refused (RESOURCE_EXHAUSTED: the balancer's load shedding, with the client's
p99 time to the refusal) or failed (none may end CANCELLED), and the client's own view of each
decision's latency. Offering a rate above the sustained one is the issue's overload case. A rate
counts as sustained when the client kept up (at least 95% of the calls it was to send were sent) and
at least 99% were decided. On a 2-core host the
sixteen engine processes, the load client and the balancer share the cores, so the host says more here
than the balancer does: each run reports the host's CPU use as well (``/proc/stat``), and each
service's; calls still deciding or streaming 30 s after the last arrival are cancelled by the client
and counted as unfinished, not as a status.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import yaml

from hetflow import stackctl
from hetflow.bench.flame import flame_graphs
from hetflow.bench.three_doors import CLOCK_TICKS_PER_S, cpu_of, stack_pids
from hetflow.client import build_request
from hetflow.core.stats import percentile
from hetflow.core.tokens import count_tokens
from hetflow.runtime.decision_stream import DecisionStream
from hetflow.runtime.ports import free_port
from hetflow.v1 import balancer_pb2, balancer_pb2_grpc, engine_pb2_grpc

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "local-sim.yaml"
CONTROL_SERVICES = ("balancer", "monitor", "router", "predictor")
ENGINES = 16


def stack_config(out_dir: Path) -> Path:
    """The example stack's monitor, router, predictor and balancer (its default policy) on free ports,
    with 16 simulated engines (8 of each of its two models), no gateway."""
    raw = yaml.safe_load(EXAMPLE.read_text())
    raw["stack"]["name"] = f"decision-rate-{os.getpid()}"
    for section in ("monitor", "router", "predictor", "balancer"):
        raw[section]["port"], raw[section]["metrics_port"] = free_port(), 0
    raw.pop("gateway", None)
    profiles = sorted({e["profile"] for e in raw["engines"]})
    raw["engines"] = [{"name": f"engine-{i}", "port": free_port(), "backend": "sim",
                       "profile": profiles[i % len(profiles)]} for i in range(ENGINES)]
    path = out_dir / "stack.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def shared_context(tokens: int) -> str:
    """About ``tokens`` tokens of code every call's prompt starts with (an agent's long context); "" for 0."""
    lines: list[str] = []
    counted = 0  # each line ends in a newline, so no token spans two: the text's count is the lines' sum
    while counted < tokens:
        lines.append(f"def step_{len(lines)}(values):\n    return [v * {len(lines) % 7 + 2} for v in values]\n")
        counted += count_tokens(lines[-1])
    return "".join(lines)


async def _client(address: str, rate_per_s: float, duration_s: float, seed: int,
                  context_tokens: int = 0, on_stream: bool = False) -> dict[str, Any]:
    """One load process: Poisson arrivals at ``rate_per_s``; each call decided, then streamed (1 token)."""
    context = shared_context(context_tokens)
    rng = random.Random(seed)
    decision_ms: list[float] = []
    client_ms: list[float] = []
    refused_ms: list[float] = []
    codes: dict[str, int] = {}
    engines: dict[str, engine_pb2_grpc.EngineStub] = {}
    channels: list[grpc.aio.Channel] = []
    balancer_channel = grpc.aio.insecure_channel(address)
    balancer = balancer_pb2_grpc.BalancerStub(balancer_channel)
    decisions = DecisionStream(balancer) if on_stream else None
    tasks: set[asyncio.Task[None]] = set()

    async def one(i: int) -> None:
        request = build_request(prompt=f"{context}Write function {seed}-{i} that sorts a list.", max_tokens=1,
                                ignore_eos=True, program_id=f"p{seed}-{i}", workflow="code", agent="coder",
                                want_receipt=True, request_id=f"r{seed}-{i}")
        started = time.perf_counter()
        try:
            decide = balancer_pb2.DecideRequest(call=request)
            decision = await (decisions.decide(decide, timeout_s=30) if decisions is not None
                              else balancer.Decide(decide, timeout=30))
            client_ms.append((time.perf_counter() - started) * 1e3)
            decision_ms.append(decision.receipt.decision_ms)
            stub = engines.get(decision.engine_address)
            if stub is None:
                channels.append(channel := grpc.aio.insecure_channel(decision.engine_address))
                stub = engines[decision.engine_address] = engine_pb2_grpc.EngineStub(channel)
            async for _ in stub.Generate(decision.engine_request, timeout=30):
                pass
            codes["OK"] = codes.get("OK", 0) + 1
        except grpc.aio.AioRpcError as exc:
            codes[exc.code().name] = codes.get(exc.code().name, 0) + 1
            if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                refused_ms.append((time.perf_counter() - started) * 1e3)

    loop = asyncio.get_running_loop()
    start_s, next_s, sent = loop.time(), 0.0, 0
    while next_s < duration_s:
        await asyncio.sleep(max(0.0, start_s + next_s - loop.time()))
        task = loop.create_task(one(sent))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        sent += 1
        next_s += rng.expovariate(rate_per_s)
    due = int(rate_per_s * duration_s)
    unfinished: set[asyncio.Task[None]] = set()
    if tasks:
        _, unfinished = await asyncio.wait(set(tasks), timeout=30)
        for task in unfinished:  # still deciding or streaming 30 s after the last arrival: not a status
            task.cancel()
        await asyncio.gather(*unfinished, return_exceptions=True)
    if decisions is not None:
        await decisions.close()
    for channel in [balancer_channel, *channels]:
        await channel.close()
    return {"sent": sent, "due": due, "unfinished": len(unfinished), "decision_ms": decision_ms,
            "client_ms": client_ms, "refused_ms": refused_ms, "codes": codes}


def _client_process(args: tuple[str, float, float, int, int, bool]) -> dict[str, Any]:
    return asyncio.run(_client(*args))


def host_busy_s() -> float:
    """CPU seconds the whole host has been busy (``/proc/stat``: user, nice, system, irq, softirq, steal)."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / CLOCK_TICKS_PER_S


def run_rate(address: str, rate_per_s: float, duration_s: float, clients: int,
             pids: dict[str, int], context_tokens: int = 0, on_stream: bool = False) -> dict[str, Any]:
    before, host_before, wall_s = cpu_of(pids), host_busy_s(), time.monotonic()
    with multiprocessing.get_context("spawn").Pool(clients) as pool:
        parts = pool.map(_client_process, [(address, rate_per_s / clients, duration_s, int(1000 * rate_per_s) + k,
                                            context_tokens, on_stream) for k in range(clients)])
    wall_s = time.monotonic() - wall_s
    after, host_s = cpu_of(pids), host_busy_s() - host_before
    decision_ms = sorted(ms for p in parts for ms in p["decision_ms"])
    client_ms = sorted(ms for p in parts for ms in p["client_ms"])
    refused_ms = sorted(ms for p in parts for ms in p["refused_ms"])
    codes: dict[str, int] = {}
    for p in parts:
        for code, n in p["codes"].items():
            codes[code] = codes.get(code, 0) + n
    sent, due = sum(p["sent"] for p in parts), sum(p["due"] for p in parts)
    unfinished = sum(p["unfinished"] for p in parts)
    decided = len(decision_ms)
    return {"rate_per_s": rate_per_s, "sent": sent, "due": due, "decided": decided, "codes": codes,
            "unfinished": unfinished,
            "decisions_per_s": decided / duration_s,
            "decision_p50_ms": percentile(decision_ms, 0.5) if decision_ms else None,
            "decision_p99_ms": percentile(decision_ms, 0.99) if decision_ms else None,
            "client_p50_ms": percentile(client_ms, 0.5) if client_ms else None,
            "client_p99_ms": percentile(client_ms, 0.99) if client_ms else None,
            "refused_p99_ms": percentile(refused_ms, 0.99) if refused_ms else None,
            "sustained": sent >= 0.95 * due and decided >= 0.99 * sent,
            "cpu_s": {name: round(after[name] - before[name], 2) for name in after},
            "host_cores_busy": host_s / wall_s, "host_cores": os.cpu_count()}


def per_decision_ms(row: dict[str, Any]) -> dict[str, float]:
    """Each service's CPU per decision (ms), the control services' together as ``control``, the engines'
    together as ``engines``."""
    decided = max(1, row["decided"])
    cpu_s = row["cpu_s"]
    out = {name: round(1e3 * cpu_s[name] / decided, 2) for name in CONTROL_SERVICES if name in cpu_s}
    out["control"] = round(sum(out.values()), 2)
    out["engines"] = round(1e3 * sum(v for k, v in cpu_s.items() if k not in CONTROL_SERVICES) / decided, 2)
    return out


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} ms"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m hetflow.bench.decision_rate", description=__doc__.split("\n\n")[0])
    p.add_argument("--rates", default="100,200,400,800", help="decisions per second to offer, in turn")
    p.add_argument("--duration", type=float, default=20.0, help="seconds of load per rate")
    p.add_argument("--clients", type=int, default=4, help="load-client processes")
    p.add_argument("--context-tokens", type=int, default=0,
                   help="about this many tokens of shared context before each call's question (an agent's prompt)")
    p.add_argument("--decide-on", choices=("call", "stream"), default="call",
                   help="each decision its own Decide call, or each client's decisions on one DecideStream")
    p.add_argument("--out", default="")
    p.add_argument("--profile", action="store_true",
                   help="record a py-spy flame graph of each control service at each rate, into --out")
    args = p.parse_args(argv)
    out_dir = Path(args.out or tempfile.mkdtemp(prefix="decision-rate-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    config = stack_config(out_dir)
    raw = yaml.safe_load(config.read_text())
    address = f"127.0.0.1:{raw['balancer']['port']}"
    if stackctl.up(config, 300, detach=False) != 0:
        raise RuntimeError("the stack did not start")
    rows = []
    try:
        pids = stack_pids(config)
        control = {name: pid for name, pid in pids.items() if name in CONTROL_SERVICES}
        for rate in (float(r) for r in args.rates.split(",")):
            with (flame_graphs(control, out_dir, f"{rate:g}") if args.profile
                  else contextlib.nullcontext()):
                row = run_rate(address, rate, args.duration, args.clients, pids, args.context_tokens,
                               args.decide_on == "stream")
            rows.append(row)
            print(f"offered {rate:.0f}/s: decided {row['decisions_per_s']:.0f}/s ({row['decided']} of {row['sent']} "
                  f"sent, {row['due']} due), decision p50 {_ms(row['decision_p50_ms'])} p99 "
                  f"{_ms(row['decision_p99_ms'])} (client p50 {_ms(row['client_p50_ms'])} p99 "
                  f"{_ms(row['client_p99_ms'])}), codes {row['codes']} (refusals p99 {_ms(row['refused_p99_ms'])}), "
                  f"unfinished {row['unfinished']}, "
                  f"sustained {row['sustained']}, CPU ms per decision {per_decision_ms(row)}, "
                  f"host cores busy {row['host_cores_busy']:.2f} of {row['host_cores']}", flush=True)
    finally:
        stackctl.down(config)
    (out_dir / "decision_rate.json").write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1))
    print(f"written: {out_dir / 'decision_rate.json'}")


if __name__ == "__main__":
    main()
