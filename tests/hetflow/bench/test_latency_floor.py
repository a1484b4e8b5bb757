"""The latency floor: each call alone on its fastest engine with the ideal prefix cache, on the critical path."""

import pytest
import yaml

from hetflow.bench.latency_floor import floor_quantiles_s, latency_floors_s
from hetflow.bench.sweep import Sweep, SweepSpec, at_rate, simulation
from hetflow.core.engine.profile import EngineSpec
from hetflow.core.presets import resolve
from hetflow.core.trace import StageRecord
from simulator.run import reference_latencies
from tests.factories import profile

M, OTHER = "m", "other"
SYSTEM = {"text": "tools", "tokens": 400}


def stage(program_id: str, index: int, parts: list, prompt: int, output: int, tool_s: float = 0.0,
          depends_on: tuple[int, ...] = (), other_output: int | None = None) -> StageRecord:
    outputs = {M: output, OTHER: output if other_output is None else other_output}
    return StageRecord(program_id, "agent", "", index, 3, "agent", "", list(depends_on), "", "",
                       {M: prompt, OTHER: prompt}, outputs, {M: True, OTHER: True}, 0.0,
                       prompt_parts=parts, tool_s=tool_s)


def test_a_chain_is_its_calls_alone_after_their_tool_times_with_its_own_context_cached():
    chain = [stage("a", 1, [SYSTEM, {"text": "task", "tokens": 100}], 500, 40),
             stage("a", 2, [SYSTEM, {"text": "task", "tokens": 100}, {"output_of": 1}, {"text": "obs", "tokens": 60}],
                   600, 20, tool_s=3.0, depends_on=(1,))]
    p = profile()
    floor = latency_floors_s(chain, [EngineSpec("e0", M, p), EngineSpec("e1", M, p)])["a"]
    assert floor == pytest.approx(p.isolated_request_s(500, 40, 0) + 3.0 + p.isolated_request_s(600, 20, 540))


def test_a_later_program_finds_the_shared_system_prompt_cached_so_its_floor_is_below_its_exclusive_latency():
    first = stage("a", 1, [SYSTEM, {"text": "task-a", "tokens": 100}], 500, 10)
    later = stage("b", 1, [SYSTEM, {"text": "task-b", "tokens": 100}], 500, 10)
    engines = [EngineSpec("e0", M, profile())]
    floors = latency_floors_s([first, later], engines)
    exclusive = reference_latencies([[first], [later]], engines)
    assert floors["a"] == pytest.approx(exclusive["a"])             # nothing before it: as alone
    assert floors["b"] == pytest.approx(profile().isolated_request_s(500, 10, 400))
    assert floors["b"] < exclusive["b"]


def test_a_first_stage_starts_at_arrival_whatever_its_tool_time_as_the_simulator_starts_it():
    root = stage("r", 1, [{"text": "q", "tokens": 50}], 50, 10, tool_s=7.0)
    p = profile()
    assert latency_floors_s([root], [EngineSpec("e0", M, p)])["r"] == pytest.approx(p.isolated_request_s(50, 10, 0))


def test_parallel_stages_count_once_on_the_critical_path():
    parts = [{"text": "q", "tokens": 50}]
    dag = [stage("d", 1, parts, 50, 30),
           stage("d", 2, [*parts, {"output_of": 1}, {"text": "x", "tokens": 5}], 85, 200, depends_on=(1,)),
           stage("d", 3, [*parts, {"output_of": 1}, {"text": "y", "tokens": 5}], 85, 10, depends_on=(1,))]
    p = profile()
    floor = latency_floors_s(dag, [EngineSpec("e0", M, p)])["d"]
    assert floor == pytest.approx(p.isolated_request_s(50, 30, 0) + p.isolated_request_s(85, 200, 80))


def test_each_call_takes_the_engine_that_serves_it_fastest_with_that_models_tokens():
    fast, slow = profile(), profile(decode_base_ms=40.0)
    call = stage("a", 1, [{"text": "t", "tokens": 300}], 300, 50, other_output=5)
    mixed = [EngineSpec("e0", M, fast), EngineSpec("e1", OTHER, slow)]
    floor = latency_floors_s([call], mixed)["a"]
    assert floor == pytest.approx(min(fast.isolated_request_s(300, 50), slow.isolated_request_s(300, 5)))
    assert floor == pytest.approx(slow.isolated_request_s(300, 5))  # 5 slow tokens beat 50 fast ones


def test_the_longest_decile_is_picked_by_exclusive_latency_not_by_floor():
    floors = {f"p{i}": float(i) for i in range(20)}
    exclusive = {f"p{i}": float(-i) for i in range(20)}             # the order reversed: p0 and p1 are longest
    quantiles = floor_quantiles_s(floors, exclusive)
    assert quantiles["longest_decile_p95_s"] == pytest.approx(0.95)  # of floors 0 and 1
    assert quantiles["p95_s"] == pytest.approx(18.05)


@pytest.mark.slow  # a simulation
def test_no_program_of_a_loaded_run_finishes_below_its_floor(tmp_path):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump({
        "stack": {"name": "tiny"}, "router": {"models": {"qwen2.5-7b-instruct": 0.62}},
        "engines": [{"name": f"e{i}", "profile": "qwen2.5-7b-instruct@l4"} for i in range(2)]}))
    spec_path = tmp_path / "sweep.yaml"
    spec_path.write_text(yaml.safe_dump({"name": "floor", "cluster": str(cluster),
                                         "trace": {"family": "agent", "programs": 40},
                                         "loads": {"rates": [0.5]}, "seeds": [1], "policies": ["llm-d"]}))
    sweep = Sweep(SweepSpec.from_yaml(spec_path), workers=1)
    records = sweep.traces[1]
    floors = latency_floors_s(records, sweep.engines)
    sim = simulation(sweep.engines, resolve("llm-d"), sweep.signals[1])
    results = sim.run(at_rate(records, 0.5), isolated_s=sweep.isolated_s(1))
    assert len(results) == len(floors) == 40
    assert sum(r.queued_s for r in results) > 0                     # loaded: calls waited
    assert all(r.latency_s >= floors[r.program_id] * (1 - 1e-9) for r in results)
    assert any(r.latency_s > 1.2 * floors[r.program_id] for r in results)
