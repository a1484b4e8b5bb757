"""Decode runs taken as one event (issue 32) against stepping every iteration, the reference mode: the
same results on small traces, under light load, under KV pressure with preemptions, with holds, and
with engines read and fed in the middle of a run."""

import math
from dataclasses import replace

import pytest

from hetflow.core.engine.profile import EngineSpec, load_profile
from hetflow.core.engine.queues import QueueConfig
from hetflow.core.engine.request import EngineRequest
from hetflow.core.policy_config import PolicyConfig, StageConfig
from hetflow.core.presets import resolve
from hetflow.workloads.generate import generate
from simulator import decode_jump
from simulator.clock import EventLoop
from simulator.engine import VirtualEngine
from simulator.metrics import summarize
from simulator.run import Simulation
from simulator.signals import Signals

pytestmark = pytest.mark.slow  # runs whole simulations

SMALL, LARGE = "qwen2.5-1.5b-instruct", "qwen2.5-7b-instruct"
WALL_CLOCK = {"scheduler_overhead_ms"}
"""Figures of the simulator's own wall time, not of the simulated cluster."""
RESERVING = replace(PolicyConfig(), reserve=StageConfig("predicted-quantile"))
"""The default with room reserved for decode growth (issue 35), which admission by reserve exercises."""


def _engines(kv_tokens: int | None = None, gpu: str = "a6000") -> list[EngineSpec]:
    over = {"kv_capacity_tokens": kv_tokens} if kv_tokens else {}
    return [EngineSpec("small-0", SMALL, load_profile(f"{SMALL}@{gpu}", **over)),
            EngineSpec("small-1", SMALL, load_profile(f"{SMALL}@{gpu}", **over)),
            EngineSpec("large-0", LARGE, load_profile(f"{LARGE}@{gpu}", **over))]


def _summary(records, policy: str | PolicyConfig, decode_runs: bool, kv_tokens: int | None = None,
             queue: str = "priority", gpu: str = "a6000") -> tuple[dict, Simulation]:
    config = resolve(policy).policy if isinstance(policy, str) else policy
    sim = Simulation(_engines(kv_tokens, gpu), config, Signals("oracle", "oracle"), QueueConfig(queue),
                     decode_runs=decode_runs)
    return summarize(sim.run(records), sim.decision_ms), sim


def _differences(reference, fast, path="") -> list[str]:
    """Every figure of the two summaries more than 0.1% apart (the issue's bound), by path."""
    if isinstance(reference, dict):
        return [d for key in reference if key not in WALL_CLOCK
                for d in _differences(reference[key], fast[key], f"{path}.{key}")]
    if isinstance(reference, (list, tuple)):
        assert len(reference) == len(fast), path
        return [d for i, (a, b) in enumerate(zip(reference, fast)) for d in _differences(a, b, f"{path}[{i}]")]
    if isinstance(reference, bool) or not isinstance(reference, (int, float)):
        return [] if reference == fast else [f"{path}: {reference} != {fast}"]
    return [] if math.isclose(reference, fast, rel_tol=1e-3, abs_tol=1e-9) else [f"{path}: {reference} != {fast}"]


@pytest.mark.parametrize("policy, family, rate_per_s, kv_tokens, pressure", [
    ("hetflow", "code", 4.0, None, None),                # light load: long runs between events
    ("hetflow-no-retention", "sql", 12.0, 3000, "preemptions"),  # a small cache, no reserve: queues and preemptions
    ("round-robin", "agent", 3.0, 20000, "preemptions"), # growing contexts, prefix reuse
    ("kairos", "kairos-qa", 12.0, 2500, "held"),         # the memory packer's holds and agent priorities
    ("hetflow", "agent", 4.0, 20000, "retained"),        # KV kept across tool calls
    (RESERVING, "agent", 4.0, 20000, "reserved"),        # and growth reserved
    ("hetflow", "sql", 12.0, 6000, None),                # parallel candidates: the critical-path order
])
def test_decode_runs_give_the_reference_results(policy, family, rate_per_s, kv_tokens, pressure, monkeypatch):
    records = generate(family, 80, seed=5, models=(SMALL, LARGE), rate_per_s=rate_per_s)
    reserves: list[int] = []
    submit = VirtualEngine.submit

    def submit_noting_reserve(engine: VirtualEngine, req: EngineRequest) -> None:
        reserves.append(req.reserve_output_tokens)
        submit(engine, req)

    monkeypatch.setattr(VirtualEngine, "submit", submit_noting_reserve)
    reference, ref_sim = _summary(records, policy, decode_runs=False, kv_tokens=kv_tokens)
    fast, fast_sim = _summary(records, policy, decode_runs=True, kv_tokens=kv_tokens)
    assert _differences(reference, fast) == []
    assert sum(e.iterations_in_runs for e in fast_sim.engines.values()) > 0  # runs were taken
    if pressure == "preemptions":
        assert reference["preemptions"] > 0  # the cache was tight enough to preempt
    if pressure == "held":
        assert ref_sim.held > 0  # the packer held calls for room
    if pressure == "reserved":
        assert any(reserves)  # the calls reached the engines with their reserves
    else:
        assert not any(reserves)
    if pressure == "retained":
        released = [e.scheduler.retained_released for e in ref_sim.engines.values()]
        assert sum(r["resumed"] for r in released) > 0 and sum(r["expired"] + r["pressure"] for r in released) > 0
    assert fast_sim.prefix_hit_rate == pytest.approx(ref_sim.prefix_hit_rate, rel=1e-3)
    assert [e.max_used_blocks for e in fast_sim.engines.values()] == \
        [e.max_used_blocks for e in ref_sim.engines.values()]


@pytest.mark.parametrize("gpu", ["h100-80g", "h200"])
def test_decode_runs_over_measured_operator_tables_give_the_reference_results(gpu):
    """Measured profiles are not linear in the context: a run sums their per-iteration times instead."""
    records = generate("agent", 60, seed=7, models=(SMALL, LARGE), rate_per_s=6.0)
    reference, _ = _summary(records, "hetflow", decode_runs=False, kv_tokens=40000, gpu=gpu)
    fast, fast_sim = _summary(records, "hetflow", decode_runs=True, kv_tokens=40000, gpu=gpu)
    assert fast_sim.engines["large-0"].scheduler.profile.operator_tables is not None
    assert _differences(reference, fast) == []
    assert sum(e.iterations_in_runs for e in fast_sim.engines.values()) > 0


def test_mlfq_engines_step_every_iteration():
    """MLFQ demotes by attained service at every iteration: no decode runs (its results are the reference's)."""
    records = generate("code", 30, seed=5, models=(SMALL, LARGE), rate_per_s=4.0)
    reference, _ = _summary(records, "mlfq", decode_runs=False, queue="mlfq")
    fast, _ = _summary(records, "mlfq", decode_runs=True, queue="mlfq")
    assert _differences(reference, fast) == []


def _engine_with_batch(decode_runs: bool, max_num_seqs: int = 256) -> tuple[EventLoop, VirtualEngine,
                                                                           list[EngineRequest]]:
    loop, done = EventLoop(), []
    profile = load_profile(f"{SMALL}@a6000", max_num_seqs=max_num_seqs)
    engine = VirtualEngine("e", SMALL, profile, QueueConfig(), loop, done.append, decode_runs=decode_runs)
    requests = [EngineRequest(f"r{i}", prompt_tokens=40 + 7 * i, max_tokens=200 + 31 * i, priority=float(i),
                              arrival_s=0.0) for i in range(4)]
    for req in requests:
        engine.submit(req)
    return loop, engine, requests


@pytest.mark.parametrize("max_num_seqs, late_s, second_report_s", [(256, 1.7, 2.3), (4, 1.2, 1.3)])
def test_a_run_read_and_fed_mid_way_is_where_stepping_would_be(max_num_seqs, late_s, second_report_s):
    """A status report and a new request in the middle of a run see and leave the engine exactly as
    stepping does: every request's tokens, the KV blocks held, the iteration count, each finish time.
    With room in the batch the request ends the run at the iteration in progress; with the batch full
    (4 sequences) the run goes on and the request waits for the first finish (at 1.48 s)."""
    states, runs_taken = [], 0
    for decode_runs in (False, True):
        loop, engine, requests = _engine_with_batch(decode_runs, max_num_seqs)
        seen: list = []

        def report(engine: VirtualEngine = engine, seen: list = seen) -> None:
            seen.append(engine.status())

        loop.at(1.0, report)
        late = EngineRequest("late", prompt_tokens=90, max_tokens=50, priority=0.5, arrival_s=late_s)
        loop.at(late_s, engine.submit, late)
        loop.at(second_report_s, report)
        loop.run()
        states.append((seen, engine.scheduler.iteration, [(r.output_tokens, r.finished_s) for r in [*requests, late]],
                       engine.busy_s, engine.max_used_blocks))
        runs_taken, late_first_token_s = engine.iterations_in_runs, late.first_token_s
    (ref_seen, ref_iter, ref_reqs, ref_busy, ref_blocks), (seen, iteration, reqs, busy, blocks) = states
    assert seen == ref_seen and iteration == ref_iter and ref_blocks == blocks
    assert [o for o, _ in reqs] == [o for o, _ in ref_reqs]
    assert [f for _, f in reqs] == pytest.approx([f for _, f in ref_reqs], rel=1e-12)
    assert busy == pytest.approx(ref_busy, rel=1e-12)
    assert runs_taken > 0 and seen[0].running == min(4, max_num_seqs)
    if max_num_seqs == 4:  # the late request waited while the batch was full
        assert (seen[1].waiting, seen[1].running) == (1, 4)
        assert late_first_token_s is not None and late_first_token_s > min(f for _, f in reqs[:4] if f is not None)


def _first_run(loop: EventLoop, engine: VirtualEngine) -> decode_jump.DecodeRun:
    while engine._run is None:
        assert not loop.idle, "no decode run was taken"
        loop.run_until(loop.now + 0.005)
    return engine._run


def _blocks_needed(engine: VirtualEngine, run: decode_jump.DecodeRun, iterations: int) -> int:
    size, kv = engine.scheduler.kv.block_size, engine.scheduler.kv
    return sum(max(0, -(-(r.num_computed_tokens + iterations) // size) - kv.held(r.request_id)) for r in run.requests)


@pytest.mark.parametrize("kv_tokens", [None, 16 * 30])
def test_a_run_ends_with_the_first_finish_or_before_the_kv_runs_out(kv_tokens):
    loop = EventLoop()
    profile = load_profile(f"{SMALL}@a6000", **({"kv_capacity_tokens": kv_tokens} if kv_tokens else {}))
    engine = VirtualEngine("e", SMALL, profile, QueueConfig(), loop, lambda r: None, decode_runs=True)
    for i in range(4):
        engine.submit(EngineRequest(f"t{i}", prompt_tokens=60, max_tokens=100 + 90 * i, priority=float(i),
                                    arrival_s=0.0))
    run = _first_run(loop, engine)
    shortest = min(r.output_limit - r.output_tokens for r in run.requests)
    assert 2 <= run.iterations <= shortest  # the finishing iteration is the run's last
    free = engine.scheduler.kv.free_blocks
    assert _blocks_needed(engine, run, run.iterations) <= free
    assert run.iterations == shortest or _blocks_needed(engine, run, run.iterations + 1) > free
    if kv_tokens:
        assert run.iterations < shortest  # this cache is what ends the run
    assert run.end_s(run.iterations) > run.end_s(run.iterations - 1) > run.start_s
    assert run.done_by(run.end_s(2)) == 2 and run.done_by(run.end_s(2) - 1e-9) == 1


def test_a_prefill_whose_last_chunk_is_one_token_gives_its_first_token_as_stepping_does():
    """A chunked prefill can end on a one-token chunk, which looks like a decode; its first token's time
    is the end of that iteration."""
    first_tokens = []
    for decode_runs in (False, True):
        loop = EventLoop()
        profile = load_profile(f"{SMALL}@a6000", max_num_batched_tokens=16)
        engine = VirtualEngine("e", SMALL, profile, QueueConfig(), loop, lambda r: None, decode_runs=decode_runs)
        req = EngineRequest("r", prompt_tokens=17, max_tokens=40, priority=0.0, arrival_s=0.0)
        engine.submit(req)
        loop.run()
        first_tokens.append((req.first_token_s, req.finished_s, req.output_tokens))
    assert first_tokens[0][0] is not None and first_tokens[1] == pytest.approx(first_tokens[0], rel=1e-12)
