"""What-ifs of the live race's simulated twin (docs/vllm-sim.md, "Where hetflow's door waited"): the
twin of a door at a rate, as the race runs it, with one of its differences from the live pool put in.

    python scripts/twin_what_if.py --door hetflow --rates 0.865,0.951365692002177 [--count-scale 1.178
        --scaled call|monitor|both] [--pinned | --no-retention] [--template-tokens] [--program-idle-s 15]
        [--call-delay-s 0.1 [--jitter-seeds 1,2,3]] [--engines-slower 1.02] [--live-features]
        [--holds-until-s 1376]

``--count-scale``: the balancer's prompt count (``call``), the monitor's record of it (``monitor``) or
both scaled, as the approximate count (``hetflow.core.tokens``) scaled them live. The twin's engines keep
a retained program's KV as vLLM engines can, free of admissions but not pinned; ``--pinned``: as the
twin had them before, pinned (hetflow's own engine); ``--no-retention``: nothing kept at all.
``--template-tokens``: each prompt with the chat template's own tokens the live harness sent before
cfb3c58 (``hetflow.bench.prompts.PromptText``'s, on the first part and on each user part after an answer);
``--program-idle-s``: the monitor's ``program_idle_after_s`` in the twin's (GPU) seconds, as a live stack
that does not scale it has it (30 s of the host's clock: 15 at time scale 2). ``--call-delay-s``:
every call after a program's first made that much GPU time later than its program's flow allows (its
tool time grown by it: outside every queue and engine), as a live door's own time a call
(``hetflow.bench.doors.door_transit_s_per_call``) makes it; with ``--jitter-seeds``, once per seed, each
call's delay drawn uniform on [0, twice it]. ``--engines-slower``: every engine iteration that many times
the profile's length (live engines slower at load than the twin's). ``--live-features``: the QRF's
predictions from each call's features as the live door reads them (``hetflow.bench.doors.sent_feature_row``),
not from the trace's rows. ``--holds-until-s``: also the calls
the twin held for room that left the hold by then (GPU s), how many and how long each, as the live row's
``door_waits`` counts a stopped probe's (``held_calls``, ``held_s``). Each patches
the simulator for this process alone; prints P95, the share within the SLO, the prefix hit rate and the
twin's preemptions and waits per call.
"""

from __future__ import annotations

import argparse
import functools
import random
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import hetflow.core.engine.scheduler as scheduler
import hetflow.workloads.generate as generate
import simulator.run as run
from hetflow.bench.doors import trace_start_s
from hetflow.bench.prompts import PromptText
from hetflow.bench.race import RaceSpec, door_runners
from hetflow.core.call import LlmCall
from hetflow.core.monitor.state import MonitorLimits
from hetflow.core.trace import StageRecord


def scale_counts(factor: float, where: str) -> None:
    """``--count-scale``: the balancer's prompt count, the monitor's record of it, or both, times ``factor``."""
    def call(*args: Any, **kwargs: Any) -> LlmCall:
        if kwargs.get("known_input_tokens") and where in ("call", "both"):
            kwargs["known_input_tokens"] = int(kwargs["known_input_tokens"] * factor)
        return LlmCall(*args, **kwargs)

    run.LlmCall = call  # type: ignore[assignment,misc]
    built = run.Simulation.from_preset.__func__  # type: ignore[attr-defined]

    def from_preset(cls: type, *args: Any, **kwargs: Any) -> run.Simulation:
        sim = built(cls, *args, **kwargs)
        admit = sim.monitor.admit

        def scaled(*a: Any, **k: Any) -> Any:
            if k.get("prompt_tokens") and where in ("monitor", "both"):
                k["prompt_tokens"] = int(k["prompt_tokens"] * factor)
            return admit(*a, **k)

        sim.monitor.admit = scaled
        return sim

    run.Simulation.from_preset = classmethod(from_preset)  # type: ignore[method-assign,assignment]


def pinned() -> None:
    """``--pinned``: the twin's engines pin a retained program's KV (hetflow's own engine)."""
    built = run.Simulation.from_preset.__func__  # type: ignore[attr-defined]

    def from_preset(cls: type, *args: Any, **kwargs: Any) -> run.Simulation:
        return built(cls, *args, **{**kwargs, "pins_retained_kv": True})

    run.Simulation.from_preset = classmethod(from_preset)  # type: ignore[method-assign,assignment]


def no_retention() -> None:
    """``--no-retention``: no engine keeps a finished call's KV for its program."""
    finish = scheduler.BatchScheduler.finish

    def freed(self: scheduler.BatchScheduler, req: Any, now_s: float) -> None:
        req.retain_kv_s = 0.0
        finish(self, req, now_s)

    scheduler.BatchScheduler.finish = freed  # type: ignore[method-assign]


def template_tokens() -> None:
    """``--template-tokens``: the chat template's own tokens added to each prompt, as sent before cfb3c58."""
    template = PromptText().template_tokens
    generated = generate.generate

    def templated(record: StageRecord) -> StageRecord:
        parts, added = [], 0
        for i, part in enumerate(record.prompt_parts):
            after_answer = i > 0 and "output_of" in record.prompt_parts[i - 1]
            extra = 0 if "output_of" in part else template["first"] if i == 0 else \
                template["turn"] if after_answer else 0
            parts.append({**part, "tokens": part["tokens"] + extra} if extra else part)
            added += extra
        return replace(record, prompt_parts=parts, input_tokens={m: n + added for m, n in record.input_tokens.items()})

    def generate_templated(*args: Any, **kwargs: Any) -> list[StageRecord]:
        return [templated(r) for r in generated(*args, **kwargs)]

    generate.generate = generate_templated


def call_delay(delay_s: float, jitter_seed: int | None) -> None:
    """``--call-delay-s``: each call's tool time grown by ``delay_s`` (drawn uniform on [0, twice it] with a seed)."""
    generated = generate.generate
    draw = random.Random(jitter_seed)

    def generate_later(*args: Any, **kwargs: Any) -> list[StageRecord]:
        return [replace(r, tool_s=r.tool_s + (delay_s if jitter_seed is None else draw.uniform(0, 2 * delay_s)))
                for r in generated(*args, **kwargs)]

    generate.generate = generate_later


HOLDS: list[tuple[float, float]] = []
"""(first held, left), GPU s from the trace's start, of each call of the trace the twin held for room
(``count_holds``)."""


def count_holds(trace_start_s: float) -> None:
    """Record each trace call's hold, on the live row's clock: from the trace's start, the warm-up's
    calls left out (the live row's ``door_waits`` counts from the trace's start, its warm-up's taken off)."""
    leave = run.Simulation._leave_hold

    def left(self: run.Simulation, request_id: str) -> float | None:
        held_since_s = leave(self, request_id)
        if held_since_s is not None and not request_id.startswith("warmup-"):
            HOLDS.append((held_since_s - trace_start_s, self.loop.now - trace_start_s))
        return held_since_s

    run.Simulation._leave_hold = left  # type: ignore[method-assign]


def engines_slower(factor: float) -> None:
    """``--engines-slower``: every engine iteration ``factor`` times the profile's length."""
    duration_ms = scheduler.StepPlan.duration_ms

    def slower(self: scheduler.StepPlan, profile: Any) -> float:
        return duration_ms(self, profile) * factor

    scheduler.StepPlan.duration_ms = slower  # type: ignore[method-assign]


def live_features() -> None:
    """``--live-features``: the QRF predicts from each call's features as the live door reads them."""
    import hetflow.bench.learned_signals as learned
    from hetflow.bench.doors import sent_feature_row
    from hetflow.bench.prompts import part_texts
    from hetflow.core.trace import programs

    text, from_trace = PromptText(), learned.examples

    def as_sent(records: Any, models: Any) -> list[Any]:
        by_key = {(r.program_id, r.stage_index): r for r in records}
        texts = {program_id: part_texts(program) for program_id, program in programs(records).items()}
        return [replace(e, row=sent_feature_row(r, e.row.model, text, texts[r.program_id]))
                for e in from_trace(records, models) for r in (by_key[(e.program_id, e.row.stage_index)],)]

    learned.examples = as_sent
    learned.learned_signals.__defaults__ = (Path(tempfile.mkdtemp(prefix="twin-as-sent-")),)  # never a cached run's


def program_idle(idle_s: float) -> None:
    """``--program-idle-s``: the monitor's ``program_idle_after_s``, in the twin's (GPU) seconds."""
    run.MonitorLimits = functools.partial(MonitorLimits, program_idle_after_s=idle_s)  # type: ignore[misc,assignment]


def main() -> None:
    """Each rate of the door's twin, with the what-ifs asked, one line each (and its holds)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--spec", type=Path, default=Path("bench/races/agent-vllm-sim-l4x4.yaml"))
    p.add_argument("--door", default="hetflow")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rates", required=True, help="comma-separated programs/s")
    p.add_argument("--count-scale", type=float, default=1.0)
    p.add_argument("--scaled", choices=("call", "monitor", "both"), default="both")
    kept = p.add_mutually_exclusive_group()
    kept.add_argument("--pinned", action="store_true")
    kept.add_argument("--no-retention", action="store_true")
    p.add_argument("--template-tokens", action="store_true")
    p.add_argument("--program-idle-s", type=float, default=None)
    p.add_argument("--call-delay-s", type=float, default=0.0)
    p.add_argument("--jitter-seeds", default="", help="comma-separated; each runs the rates with its own draws")
    p.add_argument("--engines-slower", type=float, default=1.0)
    p.add_argument("--live-features", action="store_true")
    p.add_argument("--holds-until-s", type=float, default=None)
    args = p.parse_args()
    if args.engines_slower != 1.0:
        engines_slower(args.engines_slower)
    if args.live_features:
        live_features()
    spec = RaceSpec.load(args.spec)
    if args.holds_until_s is not None:
        count_holds(trace_start_s(spec.warmup_programs))
    if args.count_scale != 1.0:
        scale_counts(args.count_scale, args.scaled)
    if args.pinned:
        pinned()
    if args.no_retention:
        no_retention()
    if args.template_tokens:
        template_tokens()
    if args.program_idle_s is not None:
        program_idle(args.program_idle_s)
    original = generate.generate
    jitter_seeds: list[int | None] = [int(j) for j in args.jitter_seeds.split(",") if j] or [None]
    for jitter_seed in jitter_seeds:
        generate.generate = original
        if args.call_delay_s:
            call_delay(args.call_delay_s, jitter_seed)
        _, sim, _ = door_runners(spec, Path("/tmp/twin-what-if"))  # reads the patched trace
        for rate in (float(r) for r in args.rates.split(",")):
            HOLDS.clear()
            report(args.door, rate, sim(args.door, args.seed, rate), args.call_delay_s, jitter_seed)
            if args.holds_until_s is not None:
                report_holds(args.holds_until_s)


def report_holds(until_s: float) -> None:
    """How many trace calls the twin held for room that left the hold by ``until_s``, and how long each."""
    held_s = sorted(left - since for since, left in HOLDS if left <= until_s)
    if held_s:
        print(f"  held for room, left by {until_s:g} s: {len(held_s)} calls, {sum(held_s) / len(held_s):.1f} s each "
              f"(median {held_s[len(held_s) // 2]:.1f} s)", flush=True)


def report(door: str, rate: float, row: dict[str, Any], delay_s: float, jitter_seed: int | None) -> None:
    """One twin row's line: P95, the share within the SLO, prefix hits, preemptions, waits, the gate."""
    later = f" +{delay_s:g} s a call" + (f" (drawn, seed {jitter_seed})" if jitter_seed is not None else "") \
        if delay_s else ""
    gate = {name: round(halves["second_half"], 1) for name, halves in row.get("gate", {}).get("means", {}).items()
            if "second_half" in halves}
    print(f"{door} {rate:.4g}/s{later}: P95 {row['latency_s']['p95']:.1f} s, within {row['within_slo_share']:.1%}, "
          f"hits {row['prefix_hit_rate']:.1%}, {row['preemptions']} preemptions, "
          f"waits per call {row['twin_wait_s_per_call']}, "
          f"client's wait {row['client_wait_s_per_call']:.2f} s, the gate over the second half {gate}", flush=True)


if __name__ == "__main__":
    main()
