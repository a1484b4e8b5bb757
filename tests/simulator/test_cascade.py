"""The simulated cascade (Cascadia 3.3): every call starts on c_1, the judge's grade against h_1 decides
whether it is forwarded, the judge's call runs on an engine, and nothing is left in flight."""

import pytest

from hetflow.core.cascade.config import CascadeConfig, JudgeSpec
from hetflow.core.cascade.learned_scorer import train
from hetflow.core.cascade.modelled_judge import judge_grade
from hetflow.core.engine.profile import EngineSpec, load_profile
from hetflow.core.presets import resolve
from hetflow.workloads.generate import generate
from simulator.cascade import SimCascade
from simulator.run import Simulation
from simulator.signals import Signals

SMALL, LARGE = "qwen2.5-1.5b-instruct", "qwen2.5-7b-instruct"
ENGINES = [EngineSpec("small-0", SMALL, load_profile(f"{SMALL}@a100-80g")),
           EngineSpec("large-0", LARGE, load_profile(f"{LARGE}@a100-80g"))]
LLM_JUDGE = JudgeSpec(kind="llm", model=LARGE)


@pytest.fixture(scope="module")
def trace():
    return generate("math", 40, seed=2, models=(SMALL, LARGE), rate_per_s=2.0)


def run(trace, h1: float, judge: JudgeSpec = LLM_JUDGE, scorer=None):
    cascade = SimCascade(CascadeConfig((SMALL, LARGE), (h1,), judge), judge_seed=5, scorer=scorer)
    sim = Simulation(ENGINES, resolve("hetflow").policy, Signals("prior", "oracle"), cascade=cascade)
    return sim, sim.run(trace)


def test_a_call_is_forwarded_exactly_when_the_judges_grade_is_below_h1(trace):
    sim, results = run(trace, 60.0)
    assert len(results) == len({r.program_id for r in trace}) and not sim.rejected
    expected = {f"{r.program_id}/{r.stage_index}": judge_grade(r.correct[SMALL], r.program_id, r.stage_index, SMALL, 5)
                < 60.0 for r in trace}
    first = {key: outcome for key, model, _, outcome in sim.cascade_stages if model == SMALL}
    assert first == {key: "escalated" if below else "accepted" for key, below in expected.items()}
    assert 0 < sum(expected.values()) < len(expected)
    last = [outcome for _, model, grade, outcome in sim.cascade_stages if model == LARGE]
    assert set(last) == {"last-model"} and len(last) == sum(expected.values())
    by_program = {r.program_id: r for r in results}
    for record in trace:  # the final answer's model: the large one exactly when the last call was forwarded
        if record.stage_index == record.stage_count:
            escalated = expected[f"{record.program_id}/{record.stage_index}"]
            assert by_program[record.program_id].model == (LARGE if escalated else SMALL)
    assert all(e.scheduler.num_waiting == 0 and not e.scheduler.running for e in sim.engines.values())


def test_the_judges_time_is_part_of_the_latency():
    one = generate("math", 1, seed=2, models=(SMALL, LARGE), rate_per_s=1.0)[:1]
    one[0].depends_on, one[0].stage_count = [], 1
    _, [kept] = run(one, 0.0)      # accepted on the small model after the judge's call
    _, [judged] = run(one, 100.0)  # forwarded: small, judge, then large
    alone_small = ENGINES[0].profile.isolated_request_s(one[0].input_tokens[SMALL], one[0].output_tokens[SMALL])
    assert kept.latency_s > alone_small  # the judge ran after the answer
    assert judged.latency_s > kept.latency_s and judged.model == LARGE and kept.model == SMALL


def test_a_learned_judge_grades_without_a_call(trace):
    scorer, _ = train(generate("math", 60, 0, models=[SMALL, LARGE]), [SMALL, LARGE])
    sim, results = run(trace, 50.0, JudgeSpec(kind="learned", artifact="in-memory"), scorer)
    assert len(results) == len({r.program_id for r in trace})
    graded = [grade for _, model, grade, _ in sim.cascade_stages if model == SMALL]
    assert graded and all(g is not None and 0 <= g <= 100 for g in graded)
    assert not any("/j" in rid for rid, _ in sim.rejected)


def test_an_outside_judge_adds_its_delay_and_loads_no_engine():
    one = generate("math", 1, seed=2, models=(SMALL, LARGE), rate_per_s=1.0)[:1]
    one[0].depends_on, one[0].stage_count = [], 1
    cascade = SimCascade(CascadeConfig((SMALL, LARGE), (0.0,), LLM_JUDGE), outside_judge_s=0.27)
    sim = Simulation(ENGINES, resolve("hetflow").policy, Signals("prior", "oracle"), cascade=cascade)
    [result] = sim.run(one)
    alone = ENGINES[0].profile.isolated_request_s(one[0].input_tokens[SMALL], one[0].output_tokens[SMALL])
    assert result.model == SMALL and result.latency_s == pytest.approx(alone + 0.27, rel=0.05)
    assert sim.engines["large-0"].scheduler.prefix_query_tokens == 0  # no judge call reached it
