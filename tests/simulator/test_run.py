"""The virtual-time simulator: deterministic, conserves tokens, respects KV capacity and the DAG,
leaves no in-flight entry, and runs the services' own policies (the latency-slack knob moves)."""

from dataclasses import replace

import pytest

from hetflow.core.engine.profile import EngineSpec, load_profile
from hetflow.core.policy_config import PolicyConfig, StageConfig
from hetflow.core.presets import PRESETS, resolve
from hetflow.core.stats import union_length_s
from hetflow.core.trace import programs
from hetflow.workloads.generate import generate
from simulator.metrics import summarize
from simulator.run import Simulation, reference_latency_s
from simulator.signals import Signals

pytestmark = pytest.mark.slow  # runs whole simulations

SMALL, LARGE = "qwen2.5-1.5b-instruct", "qwen2.5-7b-instruct"


def engines(kv_tokens: int | None = None):
    over = {"kv_capacity_tokens": kv_tokens} if kv_tokens else {}
    return [EngineSpec("small-0", SMALL, load_profile(f"{SMALL}@a6000", **over)),
            EngineSpec("large-0", LARGE, load_profile(f"{LARGE}@a6000", **over))]


ORACLE = Signals("oracle", "oracle")
CARD = resolve("hetflow-card").policy
"""The design card's composition: slack rule, memory packer with eq. 4, urgency (what these tests probe)."""


def simulate(records, tau=0.5, kv_tokens=None, signals=ORACLE):
    sim = Simulation(engines(kv_tokens), CARD.with_params("model", latency_slack=tau), signals)
    return sim, sim.run(records)


@pytest.fixture(scope="module")
def sql_trace():
    return generate("sql", 150, seed=3, models=(SMALL, LARGE), rate_per_s=6.0)


def test_same_trace_same_result(sql_trace):
    _, a = simulate(sql_trace)
    _, b = simulate(sql_trace)
    def key(rs):
        return [(r.program_id, r.model, r.finished_s, sorted((s, c.engine_id) for s, c in r.calls.items()))
                for r in sorted(rs, key=lambda r: r.program_id)]

    assert key(a) == key(b)


def test_tokens_are_conserved_and_kv_capacity_holds_under_pressure(sql_trace):
    sim, results = simulate(sql_trace, kv_tokens=3000)          # a small cache: queues form by memory
    groups = programs(sql_trace)
    assert len(results) == len(groups) and not sim.rejected
    for r in results:
        for record in groups[r.program_id]:
            assert r.calls[record.stage_index].output_tokens == record.output_tokens[r.model]
    for engine in sim.engines.values():
        assert engine.max_used_blocks <= engine.scheduler.kv.num_blocks
    assert summarize(results)["queueing_share"] > 0.05
    assert not sim.monitor.entries                                 # no in-flight entry left behind


def test_parallel_calls_waiting_together_count_once_in_the_queueing_share(sql_trace):
    _, results = simulate(sql_trace, kv_tokens=3000)
    summed = [r for r in results if sum(c.queued_s for c in r.calls.values()) > r.latency_s]
    assert summed                                                  # the fan-out's waits overlap under pressure
    assert all(0.0 <= r.queued_s <= r.latency_s + 1e-9 for r in results)
    assert 0.0 < summarize(results)["queueing_share"] < 1.0


def test_union_length_counts_overlaps_once():
    assert union_length_s([]) == 0.0
    assert union_length_s([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0), (5.5, 5.8)]) == pytest.approx(4.0)


def test_a_stage_never_starts_before_its_dependencies_finish(sql_trace):
    _, results = simulate(sql_trace)
    groups = programs(sql_trace)
    for r in results:
        for record in groups[r.program_id]:
            call = r.calls[record.stage_index]
            assert all(call.dispatched_s >= r.calls[d].finished_s for d in record.depends_on)
            assert call.first_scheduled_s >= call.dispatched_s and call.finished_s >= call.first_scheduled_s


def test_latency_slack_trades_latency_for_score():
    trace = generate("code", 300, seed=5, models=(SMALL, LARGE), rate_per_s=8.0)
    tight, loose = summarize(simulate(trace, tau=0.0)[1]), summarize(simulate(trace, tau=4.0)[1])
    assert loose["models"].get(LARGE, 0) > tight["models"].get(LARGE, 0)
    assert loose["task_score"] > tight["task_score"]
    assert loose["expected_task_score"] > tight["expected_task_score"]


@pytest.mark.parametrize("model_policy", ["least-load", "round-robin"])
def test_baselines_run_without_affinity(sql_trace, model_policy):
    sim = Simulation(engines(), PolicyConfig(StageConfig(model_policy), StageConfig(model_policy),
                                             StageConfig("fcfs")), Signals("prior", "oracle"))
    results = sim.run(sql_trace)
    assert len(results) == len(programs(sql_trace)) and not sim.monitor.entries
    per_engine = {e: sum(c.engine_id == e for r in results for c in r.calls.values()) for e in sim.engines}
    assert min(per_engine.values()) > 0                            # both engines serve
    mixed = [r for r in results if len({c.engine_id for c in r.calls.values()}) > 1]
    assert mixed                                                   # no program affinity: stages spread


def test_slo_scales_set_deadlines_per_tenant_and_urgency_serves_under_them():
    gold = generate("sql", 40, seed=5, models=(SMALL, LARGE), rate_per_s=6.0, tenant="gold")
    free = generate("sql", 40, seed=6, models=(SMALL, LARGE), rate_per_s=6.0, tenant="free")
    records = sorted(gold + [replace(r, program_id="free-" + r.program_id) for r in free], key=lambda r: r.arrival_s)
    from hetflow.core.presets import resolve

    preset = resolve("hexgen")
    sim = Simulation(engines(kv_tokens=3000), preset.policy, Signals("oracle", "oracle"), slo_scales={"gold": 3.0})
    results = sim.run(records)
    specs = engines(kv_tokens=3000)
    groups = programs(records)
    for r in results:
        if r.program_id.startswith("free-"):
            assert r.deadline_s == 0.0
        else:
            assert r.deadline_s == pytest.approx(r.arrival_s + 3.0 * reference_latency_s(groups[r.program_id], specs))
    assert len(results) == len(groups) and summarize(results)["deadline_attainment"] is not None


def test_kairos_agent_priorities_are_learned_from_the_run_in_the_background():
    from hetflow.core.presets import resolve

    records = generate("kairos-qa", 120, seed=4, models=(SMALL, LARGE), rate_per_s=4.0)
    preset = resolve("kairos")
    sim = Simulation(engines(), preset.policy, Signals("oracle", "oracle"), agent_priority_interval_s=5.0)
    results = sim.run(records)
    assert len(results) == len(programs(records))
    assert set(sim.monitor.agent_stats.anchor_distance_s) == {r.agent for r in records}


def test_memory_packer_holds_calls_under_kv_pressure_and_every_program_finishes(sql_trace):
    from hetflow.core.presets import resolve

    preset = resolve("kairos")
    sim = Simulation(engines(kv_tokens=3000), preset.policy, Signals("oracle", "oracle"))
    results = sim.run(sql_trace)
    assert len(results) == len(programs(sql_trace)) and not sim.rejected
    assert sim.held > 0                                   # the packer made calls wait for room
    assert len(sim.decisions.held) == 0                        # ... and released every one of them
    for record in sim.monitor.engines.values():
        assert list(record.ledger.window(sim.loop.now, 10)) == [0.0] * 10 and not record.in_flight


def test_alpha_tuning_replays_the_window_and_sets_the_best_alpha():
    from hetflow.core.alpha import AlphaTuner
    from hetflow.core.presets import resolve
    from simulator.tuning import SimulatedAlphaTuning

    light = generate("sql", 60, seed=8, models=(SMALL, LARGE), rate_per_s=0.5)
    heavy = generate("sql", 150, seed=9, models=(SMALL, LARGE), rate_per_s=8.0)
    offset = max(r.arrival_s for r in light) + 1.0
    records = light + [replace(r, program_id="h-" + r.program_id, arrival_s=r.arrival_s + offset) for r in heavy]
    policy = resolve("hexgen").policy

    def make(alpha):
        return Simulation(engines(kv_tokens=3000), policy.with_params("engine", alpha=alpha),
                          Signals("oracle", "oracle"))

    sim = make(0.0)
    tuning = SimulatedAlphaTuning(sim, make, AlphaTuner(window_s=60.0))  # a window reaching back into the burst
    sim.run(sorted(records, key=lambda r: r.arrival_s))
    assert tuning.tuner.history and any(test.regressed for _, test in tuning.tuner.history)
    now, alpha, by_alpha = tuning.changes[0]
    assert alpha == min(by_alpha, key=lambda a: (by_alpha[a], a)) and sim.pipeline.store.alpha == tuning.tuner.alpha


def test_a_chain_on_one_engine_reuses_its_parents_prompt_and_output():
    trace = [r for r in generate("code", 40, seed=3, models=(SMALL, LARGE), rate_per_s=0.5)]
    one_engine = [EngineSpec("small-0", SMALL, load_profile(f"{SMALL}@a6000"))]
    sim = Simulation(one_engine, CARD, ORACLE)
    sim.run(trace)
    without = Simulation(one_engine, CARD, ORACLE)
    without.run([replace(r, prompt_parts=[]) for r in trace])
    assert sim.prefix_hit_rate > 0.3 and without.prefix_hit_rate == 0.0


def test_each_call_records_its_prompt_and_the_part_of_it_found_cached():
    trace = generate("agent", 6, seed=2, models=(SMALL, LARGE), rate_per_s=0.05)
    one_engine = [EngineSpec("small-0", SMALL, load_profile(f"{SMALL}@a6000"))]
    sim = Simulation(one_engine, CARD, ORACLE)
    sim.run(trace)
    prompts = {(r.program_id, r.stage_index): r.input_tokens[SMALL] for r in trace}
    calls = [c for r in sim.results.values() for c in r.calls.values()]
    assert len(calls) == len(trace)
    assert all(c.prompt_tokens == prompts[(r.program_id, c.stage_index)]
               for r in sim.results.values() for c in r.calls.values())
    assert sum(c.prefix_hit_tokens for c in calls) == sim.engines["small-0"].scheduler.prefix_hit_tokens > 0
    assert all(0 < c.prompt_tokens and 0 <= c.prefix_hit_tokens for c in calls)


def test_an_engine_with_other_kv_blocks_gets_the_prompt_hashed_at_its_own_size():
    trace = generate("code", 40, seed=3, models=(SMALL, LARGE), rate_per_s=0.5)
    wide = [EngineSpec("small-0", SMALL, load_profile(f"{SMALL}@a6000", block_size=128))]
    sim = Simulation(wide, CARD, ORACLE)
    sim.run(trace)
    assert sim.prefix_hit_rate > 0.2
    assert all(r.isolated_s > 0 for r in sim.results.values())


def test_tool_time_separates_a_call_from_its_parent_and_counts_in_latency_not_in_queueing():
    trace = generate("agent", 6, seed=2, models=(SMALL, LARGE), rate_per_s=0.05)
    sim = Simulation(engines(), CARD, ORACLE)
    results = {r.program_id: r for r in sim.run(trace)}
    for pid, group in programs(trace).items():
        calls = results[pid].calls
        for record in group[1:]:
            parent = calls[record.depends_on[0]]
            assert calls[record.stage_index].dispatched_s >= parent.finished_s + record.tool_s - 1e-9
        assert results[pid].isolated_s > sum(r.tool_s for r in group)
        assert results[pid].queued_s < results[pid].latency_s - sum(r.tool_s for r in group)


def test_the_exclusive_latency_takes_each_prompts_cached_prefix_from_its_ancestors():
    group = next(g for g in programs(generate("agent", 10, seed=2, models=(SMALL, LARGE))).values() if len(g) > 4)
    spec = [engines()[0]]
    cached = reference_latency_s(group, spec)
    uncached = reference_latency_s([replace(r, prompt_parts=[]) for r in group], spec)
    assert cached < uncached


def test_the_router_changed_share_counts_decisions_the_priors_would_have_made_otherwise(sql_trace):
    sim, _ = simulate(sql_trace, tau=4.0)                                  # oracle confidences, a wide slack
    assert sim.router_asked > 0 and 0 < sim.router_changed_share <= 1
    assert sim.router_asked_share == sim.router_asked / len(sim.decision_ms) and 0 < sim.router_asked_share <= 1
    prior = Signals("prior", "oracle", priors={SMALL: 0.6, LARGE: 0.7})
    sim, _ = simulate(sql_trace, tau=4.0, signals=prior)
    assert sim.router_asked > 0 and sim.router_changed_share == 0.0        # the priors are the counterfactual
    one_model = Simulation(engines()[:1], CARD.with_params("model", latency_slack=4.0), ORACLE)
    one_model.run(sql_trace)
    assert one_model.decision_ms and one_model.router_asked_share == 0.0  # one model: no call needs the router


def test_each_decision_tells_the_policies_how_many_calls_wait_and_whether_this_one_is_held(sql_trace):
    sim = Simulation(engines(kv_tokens=3000), resolve("kairos").policy, ORACLE)
    picker, seen = sim.pipeline.engine_picker, []
    pick = picker.pick

    def recording_pick(call, snapshot, model, prediction, store):
        seen.append((call.request_id, store.call_is_held, store.waiting_calls, len(sim.decisions.held)))
        return pick(call, snapshot, model, prediction, store)

    picker.pick = recording_pick
    sim.run(sql_trace)
    assert sim.held > 0
    first_seen = set()
    for request_id, is_held, waiting, held_now in seen:
        assert is_held == (request_id in first_seen)  # only a call held before is decided again
        assert waiting == held_now + (not is_held)   # the held calls, and a new call itself
        first_seen.add(request_id)
    assert any(is_held for _, is_held, _, _ in seen)


def test_the_exclusive_latency_averages_every_engine_and_engines_alike_share_a_path():
    group = next(g for g in programs(generate("agent", 10, seed=2, models=(SMALL, LARGE))).values() if len(g) > 4)
    small, large = engines()[0], engines()[-1]
    assert small.model != large.model
    each = [reference_latency_s(group, [e]) for e in (small, small, large)]
    assert reference_latency_s(group, [small, small, large]) == pytest.approx(sum(each) / 3, rel=1e-12)


def test_calls_that_tell_only_their_session_get_their_stages_inferred_from_the_runs_before(sql_trace):
    """identity "session": the calls carry program and agent only; the monitor places each in its run and
    counts its stages from the finished runs (Kairos 4.2), learned when they end or go idle."""
    signals = Signals("oracle", "input-length")
    session = Simulation(engines(), CARD, signals, identity="session")
    results = session.run(sql_trace)
    full = Simulation(engines(), CARD, signals)
    assert len(results) == len(full.run(sql_trace)) == len(programs(sql_trace))
    learned = session.monitor.workflow_stages
    true_counts = {r.stage_count for r in sql_trace}
    assert learned.stage_counts["sql"] and set(learned.stage_counts["sql"]) <= set(range(1, max(true_counts) + 1))
    with pytest.raises(ValueError, match="input-length"):
        Simulation(engines(), CARD, ORACLE, identity="session")


def test_skipping_the_router_where_it_cannot_change_the_model_changes_no_decision(sql_trace):
    """The router is read only where two models lie within the slack (ChimeraSlack.reads_confidence); reading
    it everywhere, as before, gives the same models, engines and times."""
    always = Simulation(engines(), CARD.with_params("model", latency_slack=0.5), ORACLE)
    always.pipeline.model_picker.reads_confidence = lambda call, snapshot: True
    skipping = Simulation(engines(), CARD.with_params("model", latency_slack=0.5), ORACLE)
    a, b = always.run(sql_trace), skipping.run(sql_trace)
    assert skipping.router_asked < always.router_asked                   # some reads were skipped
    def placed(results):
        return [(r.program_id, r.model, r.finished_s, sorted((i, c.engine_id) for i, c in r.calls.items()))
                for r in results]
    assert placed(a) == placed(b)


def test_a_simulation_from_a_preset_runs_its_policy_queue_and_signals():
    from hetflow.core.engine.queues import QueueConfig, make_queue
    from simulator.signals import Signals, signals_for

    preset = resolve("hetflow")
    sim = Simulation.from_preset(engines(), preset, Signals("learned", "input-length"), identity="session")
    assert sim.signals == signals_for(preset, Signals("learned", "input-length"))
    assert sim.signals.confidence == "learned-one-difficulty"
    assert (sim.pipeline.model_picker.type_name, sim.pipeline.engine_picker.type_name) == \
        (preset.policy.model.type, preset.policy.engine.type)
    queue = make_queue(QueueConfig(discipline=preset.queue_discipline))
    assert {type(e.scheduler.queue) for e in sim.engines.values()} == {type(queue)}


def test_engines_keep_retained_kv_as_vllm_does_unless_told_they_can_pin():
    profile = load_profile("qwen2.5-7b-instruct@l4")
    engines = [EngineSpec("e0", profile.model, profile)]
    records = generate("agent", 12, 1, [profile.model], rate_per_s=1.0)

    def retained(pins: bool) -> tuple[bool, dict[str, int]]:
        sim = Simulation.from_preset(engines, resolve("hetflow"), Signals("prior", "input-length"),
                                     pins_retained_kv=pins)
        sim.run(records)
        scheduler = sim.engines["e0"].scheduler
        return scheduler.pins_retained_kv, scheduler.retained_released

    assert Simulation(engines, resolve("hetflow").policy, Signals("prior", "input-length")) \
        .engines["e0"].scheduler.pins_retained_kv is False  # the product's engines are vLLM's
    for pins in (False, True):  # either way the retention rule holds programs' KV, and their next calls resume it
        kept_as, released = retained(pins)
        assert kept_as is pins and released["resumed"] > 0




TIGHT_KV_TOKENS = 30_000
"""Engines small enough for 30 agent programs at 4/s that the working-set gate binds."""


@pytest.fixture(scope="module")
def crowded_agents():
    return generate("agent", 30, seed=3, models=(SMALL, LARGE), rate_per_s=4.0)


def _decisions(preset_name: str, records, reads_resident: bool | None = None):
    """Where and when each call ran under ``preset_name`` on tight engines, its picker's ``reads_resident``
    as declared (None) or forced."""
    sim = Simulation.from_preset(engines(TIGHT_KV_TOKENS), resolve(preset_name), Signals("prior", "oracle"))
    if reads_resident is not None:
        sim.pipeline.engine_picker.reads_resident = reads_resident
    return sorted((r.program_id, i, c.engine_id, c.dispatched_s, c.finished_s)
                  for r in sim.run(records) for i, c in r.calls.items())


def _one_preset_per_engine_stage() -> list[str]:
    """The first preset (by name) of each engine stage the presets ship: the stage whose flag is checked."""
    firsts: dict[str, str] = {}
    for name in sorted(PRESETS):
        engine = PRESETS[name].policy.engine
        firsts.setdefault(repr((engine.type, sorted(engine.params.items()))), name)
    return sorted(firsts.values())


@pytest.mark.parametrize("preset_name", _one_preset_per_engine_stage())
def test_a_policy_decides_the_same_whether_or_not_its_snapshots_count_active_programs_it_does_not_read(
        preset_name, crowded_agents):
    """``EnginePicker.reads_resident``: a picker that says it reads no engine's active programs gets
    snapshots without them (a simulated probe then skips a pass over every engine's programs per decision);
    counting them anyway changes none of its decisions."""
    assert _decisions(preset_name, crowded_agents) == _decisions(preset_name, crowded_agents, reads_resident=True)


def test_the_default_reads_the_active_programs_and_decides_otherwise_without_them(crowded_agents):
    """The working-set gate reads them: withheld, the default's decisions change on the same trace."""
    assert Simulation.from_preset(engines(), resolve("hetflow"), ORACLE).pipeline.engine_picker.reads_resident
    assert _decisions("hetflow", crowded_agents) != _decisions("hetflow", crowded_agents, reads_resident=False)
