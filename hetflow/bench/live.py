"""``hetflow bench --live``: replay a workflow trace against a running stack, open loop, for a bounded
time, and report the simulator's metrics from what the client saw.

Programs arrive at the trace's times rescaled to ``--rate`` (Poisson or bursty as generated); a stage
is sent when the stages it depends on have answered, with their answers appended to its prompt, and
parallel stages go out together. Arrivals stop after ``--duration`` s; calls still running get
``--drain`` s. With ``--policies``, the stack is started once per named policy (hetflow.core.presets
applied to the config) and stopped after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import yaml

from hetflow import stackctl
from hetflow.bench.cluster import cluster_from_stack, models_of
from hetflow.bench.common import OUT_DIR, machine
from hetflow.client import CallResult, HetflowClient, build_request
from hetflow.core.engine.profile import EngineSpec
from hetflow.core.presets import apply_to_stack, resolve
from hetflow.core.trace import StageRecord, programs
from hetflow.runtime.config import load_stack
from simulator.metrics import summarize
from simulator.run import ProgramResult, SimulatedCall, reference_latency_s


async def replay(address: str, records: Sequence[StageRecord], duration_s: float, drain_s: float,
                 engines: Sequence[EngineSpec]) -> tuple[list[ProgramResult], list[float], list[str]]:
    """Replay the programs arriving within ``duration_s``; their results, the balancer's decision times,
    and one line per program that failed (its error), so none is lost silently."""
    groups = [g for g in programs(records).values() if g[0].arrival_s <= duration_s]
    decision_ms: list[float] = []
    async with HetflowClient(address) as client:
        t0 = time.perf_counter()
        tasks = [asyncio.create_task(_program(client, g, t0, engines, decision_ms)) for g in groups]
        done, pending = await asyncio.wait(tasks, timeout=duration_s + drain_s) if tasks else (set(), set())
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    results = [t.result() for t in done if not t.exception() and t.result().finished_s]
    errors = [f"{type(t.exception()).__name__}: {t.exception()}" for t in done if t.exception()]
    errors += [f"not finished within duration + drain ({duration_s + drain_s:g} s)"] * len(pending)
    return results, decision_ms, errors


async def _program(client: HetflowClient, program: list[StageRecord], t0: float, engines: Sequence[EngineSpec],
                   decision_ms: list[float]) -> ProgramResult:
    first = program[0]
    await asyncio.sleep(max(0.0, t0 + first.arrival_s - time.perf_counter()))
    result = ProgramResult(first.program_id, first.workflow, time.perf_counter() - t0)
    answers: dict[int, asyncio.Task[CallResult]] = {}
    for record in program:  # topological: a stage's dependencies were created before it
        answers[record.stage_index] = asyncio.create_task(
            _stage(client, record, [answers[d] for d in record.depends_on], t0, result, engines, decision_ms))
    await asyncio.gather(*answers.values())
    result.finished_s = time.perf_counter() - t0
    result.correct = first.correct.get(result.model)
    result.isolated_s = reference_latency_s(program, engines)
    return result


async def _stage(client: HetflowClient, record: StageRecord, upstream: list[asyncio.Task[CallResult]], t0: float,
                 result: ProgramResult, engines: Sequence[EngineSpec], decision_ms: list[float]) -> CallResult:
    texts = [(await u).text for u in upstream]
    max_tokens = max(1, round(statistics.mean(record.output_tokens.values())))
    request = build_request([("system", record.system_prompt), ("user", "\n\n".join([record.user_prompt, *texts]))],
                            max_tokens=max_tokens, ignore_eos=True, program_id=record.program_id,
                            workflow=record.workflow, agent=record.agent, stage_index=record.stage_index,
                            stage_count=record.stage_count, upstream_agent=record.upstream_agent,
                            tenant=record.tenant, want_receipt=True)
    sent = time.perf_counter() - t0
    call = await client.complete(request, timeout_s=600)
    if call.receipt is not None:
        decision_ms.append(call.receipt.decision_ms)
    if record.stage_index == record.stage_count:
        result.model = call.model
    result.calls[record.stage_index] = SimulatedCall(record.stage_index, call.engine_id, sent, sent + call.queued_s,
                                               sent + call.latency_s, call.output_tokens, 0,
                                               queued_intervals_s=[(sent, sent + call.queued_s)])
    return call


def run(args: argparse.Namespace) -> int:
    from hetflow.workloads.generate import generate

    raw = load_stack(Path(args.config))
    if args.policies and stackctl.read_state(raw) is not None:
        raise ValueError(f"stack {stackctl.stack_name(raw)!r} is already up with its config's policy, so --policies "
                         f"would measure it instead of each policy: `hetflow down -c {args.config}` first, or leave "
                         "out --policies to measure the running stack")
    engines = cluster_from_stack(raw)
    if args.trace:
        from hetflow.core.trace import read_jsonl

        records = list(read_jsonl(Path(args.trace)))
    else:
        records = generate(args.family, args.live_programs, args.seed, models_of(engines), arrival=args.arrival,
                           rate_per_s=args.rate, cv=args.cv)
    out = Path(args.out) if args.out else OUT_DIR / f"live-{raw.get('stack', {}).get('name', 'stack')}"
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for policy in (args.policies.split(",") if args.policies else [""]):
        config = Path(args.config)
        if policy:
            config = out / f"stack-{policy.replace(':', '_')}.yaml"
            config.write_text(yaml.safe_dump(apply_to_stack(raw, resolve(policy)), sort_keys=False))
        rows.append({"policy": policy or "config", **_one(config, raw, records, args, engines)})
    result = {"command": "hetflow bench " + " ".join(sys.argv[2:]), "machine": machine(), "rows": rows}
    (out / "results.json").write_text(json.dumps(result, indent=1))
    for r in rows:
        print(f"{r['policy']:<24} {r['programs']:>5} programs  mean {r['latency_s']['mean']:.2f} s  "
              f"p95 {r['latency_s']['p95']:.2f} s  score {r['task_score']}  queue {r['queueing_share']:.1%}  "
              f"overhead mean {r['scheduler_overhead_ms']['mean']:.2f} ms  stable {r['stability']['stable']}")
    print(f"-> {out}/results.json")
    return 0


def _one(config: Path, raw: dict, records: Sequence[StageRecord], args: argparse.Namespace,
         engines: Sequence[EngineSpec]) -> dict[str, Any]:
    started_here = stackctl.read_state(load_stack(config)) is None
    if started_here and stackctl.up(config, 240, detach=False) != 0:
        raise SystemExit(f"{config}: the stack did not start")
    try:
        host = raw.get("stack", {}).get("host", "127.0.0.1")
        address = f"{raw['balancer'].get('host', host)}:{raw['balancer']['port']}"
        results, decision_ms, errors = asyncio.run(replay(address, records, args.duration, args.drain, engines))
    finally:
        if started_here:
            stackctl.down(config)
    summary = summarize(results, decision_ms)
    summary["failed_programs"], summary["first_errors"] = len(errors), errors[:5]
    if results:
        summary["overhead_share_of_mean_latency"] = (summary["scheduler_overhead_ms"]["mean"] / 1e3
                                                     / statistics.mean(c.finished_s - c.dispatched_s
                                                                       for r in results for c in r.calls.values()))
    return summary


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("live mode")
    g.add_argument("-c", "--config", default="examples/local-sim.yaml", help="stack config (live mode)")
    g.add_argument("--trace", help="hetflow trace to replay at its own times (default: generate --family)")
    g.add_argument("--family", default="code")
    g.add_argument("--live-programs", type=int, default=200, help="programs to generate")
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--rate", type=float, default=2.0, help="programs per second")
    g.add_argument("--arrival", choices=["poisson", "gamma"], default="poisson")
    g.add_argument("--cv", type=float, default=3.0, help="gamma arrivals: coefficient of variation")
    g.add_argument("--duration", type=float, default=30.0, help="seconds of arrivals")
    g.add_argument("--drain", type=float, default=60.0, help="seconds running programs get after the last arrival")
