"""One pool per model: the client names the model, by the workload's stated mix, program by program."""

from collections import Counter

import pytest

from hetflow.core import plugins
from hetflow.core.policies.contracts import PolicyStore
from hetflow.core.policies.named_pool import drawn_model, model_shares, unit_draw
from tests.factories import call, engine, snapshot


def pick(mix, *engines, program_id="p1"):
    picker = plugins.build("model-picker", "named-pool", {} if mix is None else {"mix": mix})
    return picker.pick(call(program_id=program_id), snapshot(*engines), {}, {}, PolicyStore())


def test_the_throughput_mix_shares_programs_by_each_pools_full_batch_decode_rate():
    """A small model at 10 ms per token and 256 slots against two large engines at 40 ms and 64 slots:
    25.6 against 2 x 1.6 sequences per ms, so 8/9 of programs name the small model."""
    pool = snapshot(engine("s0", "small", decode_ms_per_token=10.0, max_batch_size=256),
                    engine("l0", "large", decode_ms_per_token=40.0, max_batch_size=64),
                    engine("l1", "large", decode_ms_per_token=40.0, max_batch_size=64))
    shares = model_shares(pool, "throughput")
    assert shares == pytest.approx({"small": 25.6 / 28.8, "large": 3.2 / 28.8})
    named = Counter(drawn_model(shares, unit_draw(f"p{i}")) for i in range(9000))
    assert named["small"] / 9000 == pytest.approx(8 / 9, abs=0.02)


def test_the_throughput_mix_leaves_out_an_engine_that_told_no_speed():
    pool = snapshot(engine("s0", "small", decode_ms_per_token=10.0, max_batch_size=256),
                    engine("s1", "small", decode_ms_per_token=0.0, max_batch_size=256),   # no profile yet
                    engine("l0", "large", decode_ms_per_token=40.0, max_batch_size=64))
    assert model_shares(pool, "throughput") == pytest.approx({"small": 25.6 / 27.2, "large": 1.6 / 27.2})


def test_a_stated_mix_names_only_the_models_it_weights():
    engines = (engine("s0", "small"), engine("l0", "large"))
    assert {pick({"large": 1.0}, *engines, program_id=f"p{i}").chosen for i in range(50)} == {"large"}


def test_every_call_of_a_program_names_the_same_model_whatever_came_before():
    engines = (engine("s0", "small"), engine("l0", "large"))
    first = [pick({"small": 1, "large": 1}, *engines, program_id=f"p{i}").chosen for i in range(40)]
    again = [pick({"small": 1, "large": 1}, *engines, program_id=f"p{i}").chosen for i in reversed(range(40))]
    assert first == list(reversed(again)) and set(first) == {"small", "large"}


def test_a_mix_that_names_no_healthy_model_leaves_the_call_to_any():
    assert pick({"gone": 1.0}, engine("s0", "small")).chosen == "small"


@pytest.mark.parametrize("mix", ["fastest", {}, {"a": -1.0}, {"a": 0.0}])
def test_a_mix_that_is_neither_throughput_nor_weights_is_refused(mix):
    with pytest.raises(ValueError, match="mix"):
        plugins.build("model-picker", "named-pool", {"mix": mix})
