"""Faults, overload and a soak on a live stack of service processes (issue 14; docs/reliability.md).

    python -m hetflow.bench.reliability --scenario engine-kill,engine-stop,monitor-kill,overload
    python -m hetflow.bench.reliability --scenario soak --duration 600

Each scenario starts its own stack from ``--config`` (the supervisor's processes, fresh ports, engines
bounded at ``--max-waiting``) and drives open-loop Poisson calls (prompts of 1-8 HumanEval tasks,
16-256 output tokens, receipts on), streaming each so a failure is known to come before or after
the call's first token.

- ``engine-kill``: SIGKILL engine ``small-0`` a third of the way in (the supervisor restarts it);
- ``engine-stop``: SIGSTOP it for ``--stop-s``, then SIGCONT (a hung engine);
- ``monitor-kill``: SIGKILL the monitor (the supervisor restarts it, empty);
- ``overload``: first the stack's saturated throughput C (completions per second while calls are
  offered for 20 s at ``--saturate-rate``, doubled until the stack completes at most 80% of what is
  offered), then a fresh stack offered 3 C for ``--duration``;
- ``soak``: ``--rate`` for ``--duration`` with every service's resident memory sampled every 10 s.

Per fault: calls lost (failed before their first token: the target is 0), calls failed after it,
recovery (from the fault to the arrival of the last call that failed; 0 when none did) and, from the
monitor's snapshots every 0.1 s, how long the engine took to be marked unhealthy and to serve again.
Overload: the share answered RESOURCE_EXHAUSTED and the longest engine-queue wait of a served call
among the lowest-priority tenth (the largest STJF keys in the receipts). Soak: each service's memory
in the second minute against the last.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import random
import re
import signal
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Coroutine

import grpc
import yaml

from hetflow import stackctl
from hetflow.bench.common import OUT_DIR, write
from hetflow.client import HetflowClient, build_request
from hetflow.core.stats import percentile
from hetflow.runtime.channels import open_channel
from hetflow.runtime.config import load_stack
from hetflow.runtime.ports import free_port
from hetflow.v1 import monitor_pb2, monitor_pb2_grpc
from hetflow.workflows.code import TASKS

SCENARIOS = ("engine-kill", "engine-stop", "monitor-kill", "overload", "soak")
FAULT_ENGINE = "engine:small-0"
CALL_TIMEOUT_S = 180.0


@dataclass
class Outcome:
    """One call as its caller saw it; times in seconds from the run's start."""

    arrival_s: float
    code: str
    """"OK" or the gRPC status name."""
    first_token_s: float | None
    """When its first token came (None: never)."""
    end_s: float
    queued_s: float = 0.0
    priority: float = 0.0
    """The STJF key its receipt names (larger: served later)."""
    details: str = ""
    """A failure's status details and gRPC's own account of it (``debug_error_string``)."""

    @property
    def lost(self) -> bool:
        """Failed before its first token for a reason other than a refusal with a retry hint."""
        return self.code not in ("OK", "RESOURCE_EXHAUSTED") and self.first_token_s is None


def write_stack(base: Path, scenario: str, max_waiting: int, out_dir: Path = OUT_DIR / "reliability",
                stream_interval: int = 1) -> Path:
    """``base`` with fresh ports, its own name, bounded engine queues and a chunk per ``stream_interval``
    tokens, written to ``out_dir``."""
    raw = load_stack(base, environ={})
    raw["stack"]["name"] = f"reliability-{scenario}"
    for name in ("monitor", "router", "predictor", "balancer", "gateway"):
        if name in raw:
            raw[name].update(port=free_port(), metrics_port=0)
    raw["engines"] = [{**e, "port": free_port(), "metrics_port": 0, "max_waiting": max_waiting,
                       "stream_interval_tokens": stream_interval} for e in raw["engines"]]
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{scenario}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _request(rng: random.Random, program_id: str) -> Any:
    prompt = "\n\n".join(rng.choice(TASKS) for _ in range(rng.choice((1, 1, 1, 2, 4, 8))))
    return build_request([("user", prompt)], max_tokens=rng.randint(16, 256), ignore_eos=True,
                         program_id=program_id, workflow="reliability", want_receipt=True)


async def _call(client: HetflowClient, request: Any, t0: float) -> Outcome:
    arrival_s, first_s, queued_s, priority = time.perf_counter() - t0, None, 0.0, 0.0
    code, details = "OK", ""
    try:
        async for chunk in client.generate(request, timeout_s=CALL_TIMEOUT_S):
            if chunk.HasField("receipt"):
                priority = chunk.receipt.priority
            if first_s is None and chunk.output_tokens:
                first_s = time.perf_counter() - t0
            queued_s = chunk.queued_s or queued_s
    except grpc.aio.AioRpcError as exc:
        code, details = exc.code().name, f"{exc.details()} | {exc.debug_error_string()}"
    return Outcome(arrival_s, code, first_s, time.perf_counter() - t0, queued_s, priority, details)


async def drive(address: str, rate: float, duration_s: float, seed: int,
                during: Callable[[float], Coroutine[Any, Any, None]] | None = None,
                client_id: int = 0, direct: bool = False) -> list[Outcome]:
    """Poisson calls at ``rate`` for ``duration_s``; ``during(t0)`` runs beside them (the fault). ``direct``:
    the balancer only decides and the client streams from the engine (``HetflowClient``'s direct path)."""
    rng = random.Random(seed)
    async with HetflowClient(address, direct=direct) as client:
        t0 = time.perf_counter()
        side: asyncio.Task[None] | None = asyncio.create_task(during(t0)) if during is not None else None
        calls: list[asyncio.Task[Outcome]] = []
        while time.perf_counter() - t0 < duration_s:
            calls.append(asyncio.create_task(_call(client, _request(rng, f"rel-{client_id}-{len(calls)}"), t0)))
            await asyncio.sleep(rng.expovariate(rate))
        outcomes = list(await asyncio.gather(*calls))
        if side is not None:
            await side
    return outcomes


def _pid(raw: dict[str, Any], service: str) -> int:
    state = stackctl.read_state(raw)
    pid = state["services"][service]["pid"] if state else None
    if not pid:
        raise RuntimeError(f"{service} has no running process")
    return int(pid)


class HealthLog:
    """The monitor's view every 0.1 s: when each engine was healthy, and when the monitor answered."""

    def __init__(self, monitor_address: str) -> None:
        self._address = monitor_address
        self.samples: list[tuple[float, dict[str, bool] | None]] = []

    async def record(self, t0: float, until_s: float) -> None:
        async with open_channel(self._address) as channel:  # reconnects within 1 s of a restart
            stub = monitor_pb2_grpc.MonitorStub(channel)
            while time.perf_counter() - t0 < until_s:
                try:
                    snap = await stub.Snapshot(monitor_pb2.SnapshotRequest(), timeout=0.5)
                    view: dict[str, bool] | None = {e.status.engine_id: e.healthy for e in snap.engines}
                except grpc.aio.AioRpcError:
                    view = None
                self.samples.append((time.perf_counter() - t0, view))
                await asyncio.sleep(0.1)

    def first_after(self, after_s: float, holds: Callable[[dict[str, bool] | None], bool]) -> float | None:
        return next((t - after_s for t, view in self.samples if t >= after_s and holds(view)), None)


def _fault_summary(outcomes: list[Outcome], fault_s: float, health: HealthLog, engine: str) -> dict[str, Any]:
    after = [o for o in outcomes if o.arrival_s >= fault_s]
    failed_after = [o for o in after if o.code != "OK"]
    down_s = health.first_after(fault_s, lambda v: v is None or not v.get(engine, False))
    back_s = health.first_after(fault_s + (down_s or 0), lambda v: v is not None and v.get(engine, False))
    return {
        "calls": len(outcomes), "ok": sum(o.code == "OK" for o in outcomes),
        "lost_before_first_token": sum(o.lost for o in outcomes),
        "failed_after_first_token": sum(o.code != "OK" and o.first_token_s is not None for o in outcomes),
        "codes": _codes(outcomes),
        "recovery_s": max((o.arrival_s for o in failed_after), default=fault_s) - fault_s,
        "marked_unhealthy_after_s": down_s, "serving_again_after_s": (down_s or 0) + back_s if back_s else None,
    }


def _codes(outcomes: list[Outcome]) -> dict[str, int]:
    codes: dict[str, int] = {}
    for o in outcomes:
        codes[o.code] = codes.get(o.code, 0) + 1
    return codes


def _time_to_answer_s(outcomes: list[Outcome]) -> dict[str, dict[str, float]]:
    """Per status, how long callers waited for it (median, p99 and longest): a refusal should come at once."""
    out = {}
    for code in _codes(outcomes):
        waits = sorted(o.end_s - o.arrival_s for o in outcomes if o.code == code)
        out[code] = {"median_s": round(waits[len(waits) // 2], 3), "p99_s": round(percentile(waits, 0.99), 3),
                     "max_s": round(waits[-1], 3)}
    return out


def run_fault(scenario: str, config: Path, rate: float, duration_s: float, seed: int, stop_s: float,
              observe_after_s: float = 20.0) -> dict[str, Any]:
    """Drive the stack for ``duration_s`` with the fault a third of the way in, and record the monitor's
    view of the engines until ``observe_after_s`` after the load ends (the recovery the report times)."""
    raw = load_stack(config)
    address = f"127.0.0.1:{raw['balancer']['port']}"
    health = HealthLog(f"127.0.0.1:{raw['monitor']['port']}")
    fault_s = duration_s / 3
    engine = FAULT_ENGINE.split(":", 1)[1]

    async def fault(t0: float) -> None:
        recording = asyncio.create_task(health.record(t0, duration_s + observe_after_s))
        await asyncio.sleep(fault_s)
        if scenario == "engine-kill":
            os.kill(_pid(raw, FAULT_ENGINE), signal.SIGKILL)
        elif scenario == "engine-stop":
            pid = _pid(raw, FAULT_ENGINE)
            os.kill(pid, signal.SIGSTOP)
            await asyncio.sleep(stop_s)
            os.kill(pid, signal.SIGCONT)
        else:
            os.kill(_pid(raw, "monitor"), signal.SIGKILL)
        await recording

    outcomes = asyncio.run(drive(address, rate, duration_s, seed, fault))
    summary = _fault_summary(outcomes, fault_s, health, engine)
    if scenario == "monitor-kill":
        summary["monitor_answers_with_every_engine_after_s"] = health.first_after(
            fault_s, lambda v: v is not None and len(v) == len(raw["engines"]) and all(v.values()))
    return {"rate_per_s": rate, "duration_s": duration_s, "fault_at_s": fault_s, **summary}


def saturated_throughput(config: Path, rate: float, seed: int, max_rate: float = 2000.0,
                         direct: bool = False) -> float:
    """Completions per second while calls are offered faster than the stack serves them (20 s each):
    offered at ``rate``, doubled while the stack completes more than 80% of what is offered (it was not
    saturated), up to ``max_rate``."""
    raw = load_stack(config)
    while True:
        outcomes = asyncio.run(drive(f"127.0.0.1:{raw['balancer']['port']}", rate, 20.0, seed, direct=direct))
        ends = sorted(o.end_s for o in outcomes if o.code == "OK")
        completed_per_s = len([t for t in ends if 5.0 <= t <= 20.0]) / 15.0  # once queues fill, while calls come
        if completed_per_s <= 0.8 * rate or 2 * rate > max_rate:
            return completed_per_s
        rate *= 2


def _drive_process(args: tuple[str, float, float, int, int, bool]) -> list[Outcome]:
    address, rate, duration_s, seed, client_id, direct = args
    return asyncio.run(drive(address, rate, duration_s, seed, client_id=client_id, direct=direct))


def drive_processes(address: str, rate: float, duration_s: float, seed: int, clients: int,
                    direct: bool = False) -> list[Outcome]:
    """``drive`` from ``clients`` processes, each offering ``rate / clients`` on its own connection: one
    process receiving every token of three times the stack's capacity falls behind itself, and its
    calls then wait on the client's side, which a refusal's time would count."""
    if clients == 1:
        return asyncio.run(drive(address, rate, duration_s, seed, direct=direct))
    with multiprocessing.get_context("spawn").Pool(clients) as pool:
        parts = pool.map(_drive_process, [(address, rate / clients, duration_s, seed * 1000 + k, k, direct)
                                          for k in range(clients)])
    return [o for part in parts for o in part]


def run_overload(config: Path, capacity_per_s: float, duration_s: float, seed: int,
                 clients: int = 1, direct: bool = False) -> dict[str, Any]:
    raw = load_stack(config)
    pids = _service_pids(raw)
    before = _rss_mb(pids)
    outcomes = drive_processes(f"127.0.0.1:{raw['balancer']['port']}", 3 * capacity_per_s, duration_s, seed,
                               clients, direct)
    served = [o for o in outcomes if o.code == "OK"]
    cut = sorted(o.priority for o in served)[int(0.9 * len(served))] if served else 0.0
    lowest = [o for o in served if o.priority >= cut]
    return {
        "capacity_per_s": capacity_per_s, "offered_per_s": 3 * capacity_per_s, "duration_s": duration_s,
        "clients": clients, "path": "direct" if direct else "relay", "calls": len(outcomes),
        "sent_per_s": len(outcomes) / duration_s,
        "codes": _codes(outcomes), "time_to_answer": _time_to_answer_s(outcomes),
        "failure_details": _failure_details(outcomes),
        "resource_exhausted_share": sum(o.code == "RESOURCE_EXHAUSTED" for o in outcomes) / len(outcomes),
        "lost_before_first_token": sum(o.lost for o in outcomes),
        "longest_wait_lowest_priority_tenth_s": max((o.queued_s for o in lowest), default=0.0),
        "longest_wait_any_s": max((o.queued_s for o in served), default=0.0),
        "rss_mb_before": before, "rss_mb_after": _rss_mb(pids),
    }


def _failure_details(outcomes: list[Outcome], most: int = 3) -> dict[str, dict[str, int]]:
    """Per failing status, its most common details (gRPC's timestamps taken out), with counts."""
    out: dict[str, dict[str, int]] = {}
    for o in outcomes:
        if o.code != "OK":
            detail = re.sub(r'created_time:"[^"]*"', "", o.details)
            out.setdefault(o.code, {})[detail] = out.get(o.code, {}).get(detail, 0) + 1
    return {code: dict(sorted(found.items(), key=lambda kv: -kv[1])[:most]) for code, found in out.items()}


def _service_pids(raw: dict[str, Any]) -> dict[str, int]:
    state = stackctl.read_state(raw) or {}
    return {name: int(s["pid"]) for name, s in state.get("services", {}).items() if s.get("pid")}


def _rss_mb(pids: dict[str, int]) -> dict[str, float]:
    """Resident memory of each process, from /proc (Linux)."""
    out = {}
    for name, pid in pids.items():
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
        out[name] = round(kib / 1024, 1)
    return out


def run_soak(config: Path, rate: float, duration_s: float, seed: int) -> dict[str, Any]:
    raw = load_stack(config)
    pids = _service_pids(raw)
    samples: list[tuple[float, dict[str, float]]] = []

    async def sample(t0: float) -> None:
        while time.perf_counter() - t0 < duration_s:
            samples.append((time.perf_counter() - t0, _rss_mb(pids)))
            await asyncio.sleep(10.0)

    outcomes = asyncio.run(drive(f"127.0.0.1:{raw['balancer']['port']}", rate, duration_s, seed, sample))
    second_minute = [s for t, s in samples if 60 <= t < 120]
    last_minute = [s for t, s in samples if t >= duration_s - 60]
    growth = {}
    for name in pids:
        early = statistics.mean(s[name] for s in second_minute if name in s)
        late = statistics.mean(s[name] for s in last_minute if name in s)
        growth[name] = {"second_minute_mb": round(early, 1), "last_minute_mb": round(late, 1),
                        "growth": round(late / early - 1, 4)}
    return {"rate_per_s": rate, "duration_s": duration_s, "calls": len(outcomes), "codes": _codes(outcomes),
            "lost_before_first_token": sum(o.lost for o in outcomes), "rss": growth,
            "samples": [{"t_s": round(t, 1), **s} for t, s in samples]}


def _on_stack(scenario: str, args: argparse.Namespace, body: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    config = write_stack(args.config, scenario, args.max_waiting, stream_interval=args.stream_interval)
    if stackctl.up(config, 240, detach=False) != 0:
        raise SystemExit(f"{scenario}: the stack did not come up")
    try:
        return body(config)
    finally:
        stackctl.down(config)


def run(scenario: str, args: argparse.Namespace) -> dict[str, Any]:
    if scenario in ("engine-kill", "engine-stop", "monitor-kill"):
        return _on_stack(scenario, args, lambda c: run_fault(scenario, c, args.rate, args.duration, args.seed,
                                                             args.stop_s))
    if scenario == "overload":
        capacity = ({"c": args.capacity} if args.capacity else _on_stack(
            "saturate", args, lambda c: {"c": saturated_throughput(c, args.saturate_rate, args.seed,
                                                                direct=args.path == "direct")}))
        return _on_stack(scenario, args, lambda c: run_overload(c, capacity["c"], args.duration, args.seed,
                                                                  args.clients, args.path == "direct"))
    return _on_stack(scenario, args, lambda c: run_soak(c, args.rate, args.duration, args.seed))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", default="engine-kill,engine-stop,monitor-kill,overload",
                        help=f"comma-separated, of {', '.join(SCENARIOS)}")
    parser.add_argument("-c", "--config", default=Path("examples/local-sim.yaml"), type=Path)
    parser.add_argument("--rate", type=float, default=8.0, help="calls per second of the fault runs and the soak")
    parser.add_argument("--duration", type=float, default=45.0, help="seconds of arrivals per run")
    parser.add_argument("--stop-s", type=float, default=10.0, help="how long engine-stop keeps the engine stopped")
    parser.add_argument("--saturate-rate", type=float, default=60.0, help="calls per second to measure capacity")
    parser.add_argument("--capacity", type=float, default=0.0,
                        help="overload: the saturated throughput (calls/s) measured before; 0 = measure it first")
    parser.add_argument("--max-waiting", type=int, default=32, help="each engine's bound on waiting requests")
    parser.add_argument("--stream-interval", type=int, default=1, help="engines' tokens per streamed chunk")
    parser.add_argument("--clients", type=int, default=1, help="overload: load-client processes")
    parser.add_argument("--path", choices=("relay", "direct"), default="relay",
                        help="overload: tokens through the balancer, or the balancer only deciding and each "
                             "call streamed from its engine (decisions and tokens apart)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for scenario in args.scenario.split(","):
        if scenario not in SCENARIOS:
            raise SystemExit(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
        result = {"command": _command(scenario, args), "scenario": scenario, **run(scenario, args)}
        path = write(f"reliability-{scenario}", result)
        print(f"{scenario}: " + ", ".join(f"{k}={v}" for k, v in result.items()
                                          if k not in ("samples", "command", "rss_mb_before", "rss_mb_after"))
              + f"\n-> {path}")


def _command(scenario: str, args: argparse.Namespace) -> str:
    return (f"python -m hetflow.bench.reliability --scenario {scenario} -c {args.config} --rate {args.rate:g} "
            f"--duration {args.duration:g} --stop-s {args.stop_s:g} --saturate-rate {args.saturate_rate:g} "
            + (f"--capacity {args.capacity:g} " if args.capacity else "")
            + f"--max-waiting {args.max_waiting} --stream-interval {args.stream_interval} --seed {args.seed}"
            + (f" --clients {args.clients}" if args.clients != 1 else "")
            + (f" --path {args.path}" if args.path != "relay" else ""))


if __name__ == "__main__":
    main()
