"""The live harness's pieces that need no process: prompts with the trace's token counts, each door's
dialect, hetflow's stack in front of the pool, and what a server's metrics say about the host."""

import json
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from balancer_svc.config import from_stack as balancer_config
from engine_svc.backends.sim import StepLag
from engine_svc.vllm_sim.metrics import VllmSimMetrics
from hetflow.bench.doors import (
    ROUTER_REQUEST_TIMEOUT_S,
    SIMULATED_AS,
    Door,
    StageCall,
    as_the_client_sees,
    body_for,
    call_shares,
    client_wait_s,
    counters_of,
    door_transit_s_per_call,
    door_waits_of,
    failure,
    hetflow_stack,
    release_rounds,
    sent_feature_row,
    settled_misses,
    simulated_row,
    stop_when_settled,
    twin_spec,
)
from hetflow.bench.prompts import part_texts
from hetflow.core.engine.aging_queue import AgingPriorityQueue
from hetflow.core.engine.profile import EngineSpec, load_profile
from hetflow.core.engine.scheduler import BatchScheduler, StepPlan
from hetflow.core.monitor.state import MonitorLimits
from hetflow.core.plugins import build
from hetflow.core.policies.workflow_ttl import WorkflowTtl
from hetflow.core.policy_config import PolicyConfig
from hetflow.core.presets import resolve
from hetflow.runtime import tinymodel
from hetflow.workloads.generate import generate
from monitor_svc.config import from_stack as monitor_config
from simulator.run import ProgramResult, SimulatedCall
from simulator.settle import StopBelowSlo
from tests.factories import stage_record


def test_each_door_speaks_its_own_dialect():
    call = StageCall(stage_record(), [{"role": "user", "content": "x"}], "m", parent_agent="planner",
                     root_agent="planner", agent_step=1, resumes=True)
    hetflow_body, hetflow_headers = body_for(Door("hetflow", Path("p"), ["u"], "hetflow"), call, 0.0)
    assert hetflow_body["hetflow"] == {"program_id": "p7", "workflow": "agent", "agent": "coder", "stage_index": 2,
                                       "stage_count": 4, "upstream_agent": "planner", "tenant": "default"}
    assert "vllm_xargs" not in hetflow_body and hetflow_headers == {}
    vllm_body, vllm_headers = body_for(Door("vllm-router:program", Path("p"), ["u"], "vllm"), call, 0.0)
    context = json.loads(vllm_body["vllm_xargs"]["agentic_context"])
    assert context == {"program_id": "p7:coder", "step_id": 1, "expected_resume": True, "blocks_parent": False,
                       "parent_program_id": "p7:planner", "task_id": "p7", "agent_id": "coder",
                       "root_program_id": "p7:planner", "agent_role": "subagent"}
    assert vllm_headers == {"x-session-id": "p7"} and "hetflow" not in vllm_body
    for body in (hetflow_body, vllm_body):
        assert body["max_tokens"] == 40 and body["ignore_eos"] and body["stream"]


def test_hetflow_fronts_each_server_of_the_pool_with_a_vllm_server_engine():
    pool = {"stack": {"name": "p", "host": "127.0.0.1"},
            "vllm_sim": [{"name": "sim-0", "port": 8101, "profile": "qwen2.5-7b-instruct@h100-80g"},
                         {"name": "sim-1", "port": 8102, "profile": "qwen2.5-7b-instruct@h100-80g"}]}
    raw = hetflow_stack(pool, 2.0)
    assert [e["vllm_server"]["base_url"] for e in raw["engines"]] == ["http://127.0.0.1:8101", "http://127.0.0.1:8102"]
    assert {e["backend"] for e in raw["engines"]} == {"vllm-server"}
    assert {e["vllm_server"]["served_model"] for e in raw["engines"]} == {"qwen2.5-7b-instruct"}
    assert raw["vllm_sim"] == pool["vllm_sim"] and {"monitor", "balancer", "gateway"} <= set(raw)


def test_hetflows_time_constants_are_scaled_with_the_pool_as_the_routers_are():
    pool = {"stack": {"name": "p"}, "vllm_sim": [{"name": "sim-0", "port": 8101,
                                                   "profile": "qwen2.5-7b-instruct@l4", "time_scale": 2.0}]}
    raw = hetflow_stack(pool, 2.0)
    gpu = load_profile("qwen2.5-7b-instruct@l4").as_reported()
    reported = load_profile(raw["engines"][0]["profile"])
    assert reported.decode_ms_per_token == pytest.approx(2 * gpu.decode_ms_per_token)
    assert reported.isolated_request_s(2000, 100) == pytest.approx(2 * gpu.isolated_request_s(2000, 100))
    balancer = balancer_config(raw)
    assert balancer.max_hold_s == 2 * ROUTER_REQUEST_TIMEOUT_S
    assert balancer.policy.retention.type == PolicyConfig().retention.type
    retention = build("retention-rule", balancer.policy.retention.type, balancer.policy.retention.params)
    assert retention.max_hold_s == 2 * WorkflowTtl().max_hold_s
    assert balancer.tokenizers == {"qwen2.5-7b-instruct": str(tinymodel.DEFAULT_DIR)}  # the servers' own
    monitor = monitor_config(raw)
    assert monitor.limits.program_idle_after_s == 2 * MonitorLimits().program_idle_after_s


def test_a_failed_programs_cause_is_its_call_error_not_the_task_group():
    group = ExceptionGroup("unhandled errors in a TaskGroup", [RuntimeError("HTTP 429: no KV room")])
    assert failure(group) == "RuntimeError: HTTP 429: no KV room"
    assert failure(ValueError("x")) == "ValueError: x"


def test_late_iterations_and_preemptions_are_read_off_the_servers_metrics():
    """A live row's preemptions are its servers' (the client sees none), as its late iterations are."""
    metrics = VllmSimMetrics("m", 4096)
    plan = StepPlan(1)
    for late_share in (0.0, 0.01, 0.05, 0.2, 3.0):  # two more than 5% late
        metrics.observe_step(plan, StepLag(1.0, late_share))
    scheduler = BatchScheduler(load_profile("qwen2.5-1.5b-instruct@a6000"), AgingPriorityQueue())
    scheduler.preemptions_total = 3
    metrics.watch(scheduler)
    counters = counters_of(generate_latest(metrics.registry).decode())
    assert counters["iterations"] == 5 and counters["late_iterations"] == 2 and counters["preemptions"] == 3


def test_the_door_s_transit_is_what_the_client_saw_of_a_call_beyond_what_its_server_saw():
    """Two calls, each sent at 0 (GPU s); at time scale 2 the servers' seconds are twice the GPU's."""
    result = ProgramResult("p", "w", 0.0)
    result.calls = {1: SimulatedCall(1, "", 0.0, 0.5, 10.0, 100, 0, first_token_s=1.0),
                    2: SimulatedCall(2, "", 0.0, 0.5, 20.0, 100, 0, first_token_s=3.0)}
    servers = {"calls": 2.0, "ttft_s": 2 * (0.6 + 2.8), "e2e_s": 2 * (9.4 + 19.6)}  # 0.3 s, 0.2 s less a call
    transit = door_transit_s_per_call([result], servers, time_scale=2.0)
    assert transit == pytest.approx({"to_first_token": 0.3, "after_first_token": 0.2})
    assert door_transit_s_per_call([result], {**servers, "calls": 3.0}, 2.0) is None  # a call the client lost


def test_the_features_of_a_call_as_sent_are_its_system_prompt_and_its_own_text(text):
    model = "qwen2.5-7b-instruct"
    program = generate("agent", 1, 1, [model], rate_per_s=1.0)
    later = program[1]
    row = sent_feature_row(later, model, text, part_texts(program))
    assert row.system_prompt_tokens > 0 and row.stage_index == later.stage_index
    assert row.user_prompt[:20] == later.user_prompt.lstrip()[:20]
    assert row.input_tokens == later.input_tokens[model]


def test_call_shares_say_how_evenly_a_door_spread_its_calls():
    assert call_shares([10, 30, 0, 60]) == [0.6, 0.3, 0.1, 0.0]
    assert call_shares([0, 0]) == []


def test_the_clients_wait_is_the_first_tokens_delay_beyond_the_prefill_alone():
    profile = load_profile("qwen2.5-7b-instruct@l4")
    alone_s = profile.isolated_request_s(2000, 1, 512)
    assert client_wait_s(10.0, 10.0 + alone_s + 3.0, (2000, 512), profile) == pytest.approx(3.0)
    assert client_wait_s(10.0, 10.0 + 2 * alone_s + 6.0, (2000, 512), profile, time_scale=2.0) == pytest.approx(6.0)
    assert client_wait_s(10.0, 10.0 + alone_s / 2, (2000, 512), profile) == 0.0  # faster than alone: no wait


def test_the_twin_seen_as_the_client_sees_it_waits_at_least_its_prefills_slowdown():
    from hetflow.workloads.generate import generate
    from simulator.run import Simulation
    from simulator.signals import Signals

    profile = load_profile("qwen2.5-7b-instruct@l4")
    engines = [EngineSpec("sim-0", profile.model, profile)]
    records = generate("agent", 30, 1, [profile.model], rate_per_s=2.0)  # one engine, loaded: calls queue
    results = Simulation.from_preset(engines, resolve("hetflow"), Signals("prior", "input-length")).run(records)
    seen = as_the_client_sees(results, records, engines)
    calls = [(c, s) for r, v in zip(results, seen) for c, s in zip(r.calls.values(), v.calls.values())]
    assert sum(s.queued_s for _, s in calls) > 0
    for own, client in calls:  # one interval from the call's dispatch; its other timings untouched
        assert client.first_token_s == own.first_token_s and client.finished_s == own.finished_s
        assert len(client.queued_intervals_s) <= 1
        assert all(start == own.dispatched_s for start, _ in client.queued_intervals_s)
        assert client.dispatched_s + client.queued_s <= own.first_token_s + 1e-9


def test_hetflows_own_waits_are_summed_over_its_services_pages():
    from prometheus_client import CollectorRegistry, Histogram

    pages = []
    for name, seconds in (("hetflow_balancer_held_seconds", [2.0, 4.0]),
                          ("hetflow_engine_front_queue_seconds", [0.5]), ("hetflow_engine_front_queue_seconds", [1.5])):
        registry = CollectorRegistry()
        histogram = Histogram(name, "", registry=registry)
        for s in seconds:
            histogram.observe(s)
        pages.append(generate_latest(registry).decode())
    waits = door_waits_of(pages)
    assert waits == {"held_s": 6.0, "held_calls": 2.0, "engine_queue_s": 2.0, "engine_queue_calls": 2.0}


def test_the_balancers_release_rounds_are_read_apart_from_the_waits():
    from prometheus_client import CollectorRegistry, Counter, Histogram

    registry = CollectorRegistry()
    rounds = Histogram("hetflow_balancer_release_round_seconds", "", registry=registry)
    for s in (0.5, 1.5, 1.0):
        rounds.observe(s)
    Counter("hetflow_balancer_held_redecided", "", registry=registry).inc(30)
    Histogram("hetflow_balancer_held_seconds", "", registry=registry).observe(4.0)
    waits = door_waits_of([generate_latest(registry).decode()])
    assert waits == {"release_round_s": 3.0, "release_round_count": 3.0, "redecided_count": 30.0,
                     "held_s": 4.0, "held_calls": 1.0}
    assert release_rounds(waits, time_scale=2.0) == {"rounds": 3.0, "round_s_mean": 0.5, "redecided_per_round": 10.0}
    assert release_rounds({"held_s": 4.0, "held_calls": 1.0}, time_scale=2.0) == {}


def test_the_program_doors_twin_runs_as_the_harness_runs_the_router():
    """The session header the harness sends, the router's 30 s force-resume floor in its own clock, and no
    cached tokens (the servers report none, as vLLM by default)."""
    spec = twin_spec("vllm-router:program", time_scale=2.0)
    assert spec == "vllm-router-program:session_header=true,force_resume_floor_s=15"
    picker = resolve(spec).policy.engine
    assert picker.params == {"session_header": True, "force_resume_floor_s": 15.0}
    assert twin_spec("client-rr", time_scale=2.0) == "round-robin"


@pytest.mark.parametrize("door", sorted(SIMULATED_AS))
def test_each_door_with_a_preset_replays_the_same_trace_in_the_simulator(door):
    from hetflow.workloads.generate import generate

    profile = load_profile("qwen2.5-7b-instruct@l4")
    engines = [EngineSpec(f"sim-{i}", profile.model, profile) for i in range(2)]
    records = generate("agent", 6, 1, [profile.model], rate_per_s=0.5)
    row = simulated_row(door, records, engines, slo_scale=5.0)
    assert row["door"] == f"sim:{door}" and row["programs"] == 6
    assert sum(row["call_shares"]) == pytest.approx(1.0, abs=0.01)
    if door == "vllm-router:program":  # the trace's holds only: the warm-up's 120 programs pause 120 times at least
        assert 0 < row["router_holds"]["pauses"] < 120
    if door == "hetflow":  # the gate's inputs through the trace, from its start, as the live door samples them
        series = row["gate"]["series"]
        assert series["t_s"][0] == 10.0 and max(series["resident_tokens"]) > 0
        assert max(series["resident_growth_tokens"]) > 0  # the agent's contexts grow call to call
        assert set(row["gate"]["means"]) == {"resident_tokens", "resident_programs", "held_calls",
                                             "resident_growth_tokens"}


def test_the_routers_holds_run_from_a_programs_admit_to_its_next_pause_after_the_trace_starts():
    from hetflow.bench.doors import hold_summary, router_holds

    def line(at: str, event: str, program: str) -> str:
        return (f"\x1b[2m2026-11-26 {at}\x1b[0m \x1b[32m INFO\x1b[0m scheduler_admission.rs:945: Program scheduling "
                f'decision \x1b[3mevent\x1b[0m="{event}" \x1b[3mprogram\x1b[0m=' + program + ' target="http://x"')

    log = "\n".join([line("10:00:00", "program_admit", "aa"), line("10:00:04", "program_pause", "aa"),
                     line("10:00:05", "program_admit", "bb"), line("10:00:05", "program_admit", "aa"),
                     line("10:00:07", "program_pause", "aa"), "an unrelated line"])
    since = 1795687202.0  # 2026-11-26 10:00:02 UTC: the first hold began before the trace
    assert router_holds(log, since, time_scale=2.0) == [1.0]
    assert hold_summary([3.0, 1.0, 2.0]) == {"pauses": 3, "p50_s": 2.0, "p90_s": 2.0}
    assert hold_summary([]) == {"pauses": 0}


def test_the_warm_up_resumes_each_program_enough_to_fill_the_routers_windows_on_four_engines():
    from hetflow.bench.doors import warmup_trace
    from hetflow.core.trace import programs

    loops = programs(warmup_trace("m")).values()
    resumptions = sum(len(loop) - 1 for loop in loops)
    assert len(loops) == 120 and resumptions == 600  # >= 100 tool gaps per rank on 4 ranks, with room to spare
    last = list(loops)[0][-1]
    assert last.depends_on == [last.stage_index - 1] and last.input_tokens["m"] == 256 + 5 * (32 + 64)


def test_the_twins_trace_starts_a_minute_after_the_warm_ups_last_arrival():
    from hetflow.bench.doors import trace_start_s, warmup_trace

    for count in (1, 120):
        assert trace_start_s(count) == max(r.arrival_s for r in warmup_trace("m", count)) + 60.0
    assert trace_start_s(0) == 0.0


def test_a_refusal_before_the_stream_is_retried_as_the_openai_client_retries_it():
    import asyncio

    import httpx

    from hetflow.bench.doors import CLIENT_RETRIES, send

    answers = iter([httpx.Response(429, headers={"retry-after": "0.01"}, json={"error": {}}),
                    httpx.Response(503, json={"error": {}}),
                    httpx.Response(200, text='data: {"choices": [{"delta": {"content": "hi"}}]}\n\ndata: [DONE]\n\n')])
    door = Door("hetflow", Path("p"), ["http://door"], "hetflow", time_scale=0.01)

    async def call(transport: httpx.MockTransport):
        async with httpx.AsyncClient(transport=transport) as client:
            return await send(client, door, {}, {})

    answer, _, _ = asyncio.run(call(httpx.MockTransport(lambda request: next(answers))))
    assert answer == "hi" and door.retried_calls == 2 == CLIENT_RETRIES
    with pytest.raises(RuntimeError, match="HTTP 429"):  # refused every time: the call fails, nothing hangs
        asyncio.run(call(httpx.MockTransport(lambda request: httpx.Response(429, json={"error": {}}))))


def test_a_connection_lost_before_the_answer_is_retried_and_one_lost_after_it_fails_the_call():
    import asyncio

    import httpx

    from hetflow.bench.doors import send

    door = Door("hetflow", Path("p"), ["http://door"], "hetflow", time_scale=0.01)
    attempts = []

    def closed_once(request: httpx.Request) -> httpx.Response:
        attempts.append(request)
        if len(attempts) == 1:
            raise httpx.ReadError("the server closed the kept-alive connection")
        return httpx.Response(200, text='data: {"choices": [{"delta": {"content": "hi"}}]}\n\ndata: [DONE]\n\n')

    async def call(transport: httpx.MockTransport):
        async with httpx.AsyncClient(transport=transport) as client:
            return await send(client, door, {}, {})

    answer, _, _ = asyncio.run(call(httpx.MockTransport(closed_once)))
    assert answer == "hi" and len(attempts) == 2 and door.retried_calls == 1

    class BrokenStream(httpx.AsyncByteStream):
        async def __aiter__(self):
            yield b'data: {"choices": [{"delta": {"content": "h"}}]}\n\n'
            raise httpx.ReadError("the connection broke mid-answer")

    with pytest.raises(httpx.ReadError):  # a half-streamed answer is not sent twice
        asyncio.run(call(httpx.MockTransport(lambda request: httpx.Response(200, stream=BrokenStream()))))


def test_the_servers_behind_a_door_that_tokenizes_through_them_serve_the_render_routes(tmp_path):
    from hetflow.bench.doors import pool_stack

    pool = {"stack": {"name": "p"}, "vllm_sim": [{"name": "sim-0", "profile": "qwen2.5-7b-instruct@h100-80g"}]}
    for door, scale_out in (("vllm-router:cache_aware", True), ("vllm-router:power_of_two", False),
                            ("hetflow", False)):
        _, raw = pool_stack(pool, tmp_path, door, "fcfs")
        assert raw["vllm_sim"][0]["enable_scale_out"] is scale_out


def test_the_routers_prefix_decisions_are_read_by_outcome():
    """The router 0.1.17's own exposition (its labels as it writes them in front of two vllm-sim servers)."""
    from hetflow.bench.doors import prefix_decisions_of

    labels = 'policy="cache_aware",stage="regular"'
    text = ('# TYPE vllm_router_prefix_routing_decisions_total counter\n'
            f'vllm_router_prefix_routing_decisions_total{{{labels},outcome="prefix_hit"}} 2\n'
            f'vllm_router_prefix_routing_decisions_total{{{labels},outcome="missing_tokens"}} 7\n'
            '# TYPE vllm_router_requests_total counter\nvllm_router_requests_total{route="/v1"} 12\n'
            '# TYPE vllm_router_reservation summary\n'  # labels Prometheus's parser refuses: not read
            'vllm_router_reservation{quantile="p99",direction="over",quantile="0"} 1\n')
    assert prefix_decisions_of(text) == {"outcome=missing_tokens,policy=cache_aware,stage=regular": 7.0,
                                         "outcome=prefix_hit,policy=cache_aware,stage=regular": 2.0}


def test_hetflows_door_serves_the_qrf_the_sweeps_read_when_asked(monkeypatch, tmp_path):
    from hetflow.bench import doors

    monkeypatch.setattr(doors, "predictor_dir_for", lambda models: tmp_path / "-".join(models))
    pool = {"stack": {"name": "p"}, "vllm_sim": [{"name": "sim-0", "port": 8101, "profile": "qwen2.5-7b-instruct@l4"}]}
    assert hetflow_stack(pool, 2.0)["predictor"]["kind"] == "input-length"
    section = hetflow_stack(pool, 2.0, "qrf")["predictor"]
    assert section["kind"] == "qrf" and section["models"] == ["qwen2.5-7b-instruct"]
    assert section["artifact"] == str(tmp_path / "qwen2.5-7b-instruct")
    with pytest.raises(ValueError, match="unknown predictor"):
        hetflow_stack(pool, 2.0, "oracle")


def test_hetflows_twin_reads_the_same_qrfs_predictions_and_no_other_door_does(monkeypatch, tmp_path):
    from hetflow.bench import doors, learned_signals
    from hetflow.workloads.generate import generate
    from simulator.signals import LearnedSignals

    asked: list[tuple[int, list[str], Path]] = []

    def fake(records, models, router_dir, predictor_dir):
        asked.append((len(records), list(models), predictor_dir))
        return LearnedSignals(median_tokens={(r.program_id, r.stage_index, m): 50.0 for r in records for m in models})

    monkeypatch.setattr(doors, "predictor_dir_for", lambda models: tmp_path)
    monkeypatch.setattr(learned_signals, "learned_signals", fake)
    profile = load_profile("qwen2.5-7b-instruct@l4")
    engines = [EngineSpec(f"sim-{i}", profile.model, profile) for i in range(2)]
    records = generate("agent", 6, 1, [profile.model], rate_per_s=0.5)
    signals = doors.twin_signals("qrf", records, engines)
    assert signals.prediction == "learned" and asked == [(len(records), [profile.model], tmp_path)]
    assert doors.twin_signals("input-length", records, engines).prediction == "input-length"
    simulated_row("client-rr", records, engines, slo_scale=5.0, warmup_programs=2, predictor="qrf")
    assert len(asked) == 1                                  # round robin's twin is told nothing new
    row = simulated_row("hetflow", records, engines, slo_scale=5.0, warmup_programs=2, predictor="qrf")
    assert row["programs"] == 6 and len(asked) == 2 and asked[1][0] > len(records)  # the warm-up's calls too


def _arrived(finished_s: dict[str, float], isolated_s: float = 1.0) -> dict[str, ProgramResult]:
    """Programs arrived at 0 s, each with ``isolated_s`` of exclusive latency; 0: still running."""
    return {p: ProgramResult(p, "w", 0.0, finished_s=f, isolated_s=isolated_s) for p, f in finished_s.items()}


def test_the_settled_misses_are_the_arrived_programs_past_their_slo_instant_unfinished_or_late():
    started = _arrived({"on-time": 1.5, "late": 2.5, "running": 0.0})
    assert settled_misses(started.values(), now_s=3.0, slo_scale=2.0) == 2
    assert settled_misses(started.values(), now_s=1.9, slo_scale=2.0) == 0   # every instant still ahead


def test_a_live_probe_cancels_its_replays_once_its_failure_is_settled():
    import asyncio
    import time

    async def probe() -> tuple[dict[str, float | int], list[bool]]:
        replays = [asyncio.create_task(asyncio.sleep(3600)) for _ in range(4)]
        started = _arrived({"a": 1.5, "b": 0.0, "c": 2.5})   # b running past 2 s, c finished late; d to come
        t0 = time.perf_counter() - 3.0                      # the trace began 3 s ago (time scale 1)
        settled = await stop_when_settled(started, 4, t0, 1.0, StopBelowSlo(2.0, 0.95), replays, check_s=0.0)
        await asyncio.gather(*replays, return_exceptions=True)
        return settled, [r.cancelled() for r in replays]

    settled, cancelled = asyncio.run(probe())
    assert all(cancelled)
    assert settled["late_programs"] == 2 and settled["programs"] == 4 and settled["stopped_at_s"] >= 3.0
    assert settled["within_slo_share_at_most"] == 0.5


def test_a_live_probe_that_can_still_pass_is_left_to_finish():
    import asyncio
    import time

    async def probe() -> tuple[bool, list[str]]:
        replays = [asyncio.create_task(asyncio.sleep(0, result=f"program-{i}")) for i in range(40)]
        started = _arrived({"late": 0.0, "on-time": 1.0})   # 1 of 40 missed: 97.5% may still meet the SLO
        t0 = time.perf_counter() - 3.0
        watch = asyncio.create_task(stop_when_settled(started, 40, t0, 1.0, StopBelowSlo(2.0, 0.95), replays,
                                                      check_s=0.0))
        finished = await asyncio.gather(*replays)
        stopped = watch.done()
        watch.cancel()
        return stopped, finished

    stopped, finished = asyncio.run(probe())
    assert not stopped and finished == [f"program-{i}" for i in range(40)]
