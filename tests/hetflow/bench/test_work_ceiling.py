"""The work ceiling: an ideal prefix cache's hits, each call's unavoidable engine time, engines never idle."""

import numpy as np
import pytest

from hetflow.bench.work_ceiling import (
    CallWork,
    call_engine_ms,
    ceiling_per_s,
    hit_rate,
    ideal_cache_work,
    least_busiest_ms,
)
from hetflow.core.engine.profile import EngineSpec
from hetflow.core.trace import StageRecord
from tests.factories import profile

M = "m"


def stage(program_id: str, index: int, arrival_s: float, parts: list, prompt: int, output: int) -> StageRecord:
    return StageRecord(program_id, "agent", "", index, 2, "agent", "", [], "", "", {M: prompt}, {M: output},
                       {M: True}, arrival_s, prompt_parts=parts)


def two_programs() -> list[StageRecord]:
    system = {"text": "tools", "tokens": 100}
    return [
        stage("a", 1, 0.0, [system, {"text": "task-a", "tokens": 50}], 150, 20),
        stage("a", 2, 0.0, [system, {"text": "task-a", "tokens": 50}, {"output_of": 1},
                            {"text": "obs-a", "tokens": 30}], 200, 10),
        stage("b", 1, 1.0, [system, {"text": "task-b", "tokens": 40}], 140, 5),
        stage("b", 2, 1.0, [{"text": "other", "tokens": 60}], 60, 5),   # a fresh prompt: nothing cached
    ]


def test_each_call_reuses_the_longest_prefix_an_earlier_call_had():
    work = ideal_cache_work(two_programs(), M)
    assert work["a"] == [CallWork(150, 0, 20), CallWork(30, 170, 10)]   # its own prompt and output, then the tool's
    assert work["b"] == [CallWork(40, 100, 5), CallWork(60, 0, 5)]     # the shared system prompt only
    assert hit_rate(work) == pytest.approx(270 / 550)


def test_a_call_is_charged_the_prefill_it_adds_and_its_tokens_at_the_largest_batch_the_kv_holds():
    p = profile(prefill_ms_per_token=0.01, prefill_ms_per_context_pair=1e-5, decode_base_ms=5.0,
                decode_ms_per_seq=0.05, decode_ms_per_batch_token=0.001, kv_capacity_tokens=4096, max_num_seqs=8)
    call = CallWork(new_tokens=300, cached_tokens=700, output_tokens=24)
    prefill = 0.01 * 300 + 1e-5 * 300 * 700
    batch = 4                                                # 4096 // (1000 + 24)
    per_token = (5.0 + 0.05 * batch + 0.001 * batch * (1000 + 12)) / batch
    assert call_engine_ms(p, call) == pytest.approx(prefill + 24 * per_token)
    small = CallWork(10, 0, 4)                               # max_num_seqs bounds the batch first
    assert call_engine_ms(p, small) == pytest.approx(0.1 + 4 * (5.0 + 0.4 + 0.001 * 8 * 12) / 8)


def test_one_model_on_identical_engines_gets_engines_over_the_work_of_a_program():
    work = {"a": [CallWork(100, 0, 10)], "b": [CallWork(300, 0, 10)]}
    same = profile()
    engines = [EngineSpec("e0", M, same), EngineSpec("e1", M, same)]
    one_model_ms = (call_engine_ms(same, work["a"][0]) + call_engine_ms(same, work["b"][0])) / 2
    assert ceiling_per_s({M: work}, engines) == pytest.approx(2e3 / one_model_ms)   # engines / time per program



@pytest.mark.parametrize("costs, busiest", [
    ([[1.0, 10.0], [10.0, 1.0]], 1.0),      # each call on the engine that is fast for it
    ([[2.0, 2.0], [2.0, 2.0]], 2.0),        # equal engines share the work
    ([[1.0, 3.0]], 0.75),                   # one call split: 3/4 on the fast engine, 1/4 on the slow
])
def test_the_busiest_engine_does_as_little_as_any_split_allows(costs, busiest):
    assert least_busiest_ms(np.array(costs)) == pytest.approx(busiest)


def test_a_pool_of_two_models_gets_the_linear_programs_ceiling():
    work = {"a": [CallWork(100, 0, 10)], "b": [CallWork(300, 0, 10)]}
    other = {"a": [CallWork(50, 0, 1)], "b": [CallWork(3000, 0, 400)]}   # another model's token counts
    fast, slow = profile(), profile(decode_base_ms=10.0)
    costs = np.array([[call_engine_ms(fast, work[p][0]), call_engine_ms(slow, other[p][0])] for p in ("a", "b")])
    mixed = [EngineSpec("e0", M, fast), EngineSpec("e1", "other", slow)]
    assert ceiling_per_s({M: work, "other": other}, mixed) == pytest.approx(1e3 / least_busiest_ms(costs / 2))
