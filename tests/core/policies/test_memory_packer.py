"""Kairos 6's packer on handmade ledgers: never admits a call that overflows a slot, picks the lowest
expected peak, holds the call when nothing fits, skips suspended engines, and refuses a call no engine
could ever hold."""

from dataclasses import replace

import pytest

from hetflow.core.errors import ResourceExhausted
from hetflow.core.policies.contracts import PolicyStore, Prediction, WaitForCapacity
from hetflow.core.policies.memory_packer import MemoryPacker, plan_for
from tests.factories import call, engine, snapshot


def kv_engine(engine_id, ledger, capacity=1000, suspended=False):
    e = engine(engine_id, "m", decode_ms_per_token=50.0)          # 20 tokens/s per sequence
    return replace(e, kv_capacity_tokens=capacity, kv_ledger_tokens=tuple(ledger), suspended=suspended)


def test_never_overflows_a_slot_and_prefers_the_lowest_peak():
    c = call(prompt="x " * 100)
    busy_later = kv_engine("a", [100, 100, 990, 990])        # room now, not in two slots
    roomy = kv_engine("b", [600, 600, 600, 600])
    plan = plan_for(c, roomy, expected_s=2.0, output_tokens=40)
    assert max(plan.slot_tokens()) + 600 <= 1000
    choice = MemoryPacker().pick(c, replace(snapshot(busy_later, roomy), agent_expected_s=2.0), "m", Prediction(40),
                                 PolicyStore())
    assert choice.chosen == "b" and choice.rule == "kairos:lowest-expected-peak"
    light = kv_engine("c", [200, 200, 200, 200])
    light_snap = replace(snapshot(roomy, light), agent_expected_s=2.0)
    assert MemoryPacker().pick(c, light_snap, "m", Prediction(40), PolicyStore()).chosen == "c"


def test_holds_the_call_when_no_engine_has_room_and_skips_suspended_engines():
    c = call(prompt="x " * 100)
    full = kv_engine("a", [950] * 4)
    suspended = kv_engine("b", [0] * 4, suspended=True)
    with pytest.raises(WaitForCapacity) as held:
        MemoryPacker().pick(c, replace(snapshot(full, suspended), agent_expected_s=2.0), "m", Prediction(40),
                            PolicyStore())
    assert held.value.retry_after_s == 0.5


def test_a_call_larger_than_every_engine_is_resource_exhausted_with_the_sizes():
    c = replace(call(prompt="x " * 100), sampling=replace(call().sampling, max_tokens=5000))
    with pytest.raises(ResourceExhausted, match=r"needs \d+ KV tokens .* holds 1000"):
        MemoryPacker().pick(c, snapshot(kv_engine("a", [0])), "m", Prediction(40), PolicyStore())


@pytest.mark.parametrize("expected_s, output_tokens", [(600.0, 40), (None, 1_000_000)])
def test_a_plan_never_exceeds_prompt_plus_max_tokens(expected_s, output_tokens):
    c = call(prompt="x " * 100)  # max_tokens 16
    plan = plan_for(c, kv_engine("a", [0]), expected_s=expected_s, output_tokens=output_tokens)
    assert max(plan.slot_tokens()) <= c.input_tokens + c.sampling.max_tokens + 1e-9
