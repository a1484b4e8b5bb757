"""The load-balancer paper's baselines (C.2.4, C.3.1-C.3.3) as engine pickers, on handmade snapshots."""

from dataclasses import replace

import pytest

from hetflow.core.engine.profile import load_profile
from hetflow.core.policies.contracts import PolicyStore, Prediction, WaitForCapacity
from hetflow.core.policies.dedicated_small_large import DedicatedSmallLarge
from hetflow.core.policies.max_capacity import MaxCapacity
from hetflow.core.policies.min_min import MinMin
from hetflow.core.policies.work_left_tokens import WorkLeftTokens
from hetflow.core.snapshot import InFlightCall
from tests.factories import call, engine, snapshot

PROFILE = load_profile("qwen2.5-7b-instruct@a6000")


def test_work_left_counts_unprefilled_prompt_tokens_and_predicted_decode_tokens():
    a = replace(engine("a", "m", in_flight_tokens=100), pending_prefill_tokens=500)
    b = replace(engine("b", "m", in_flight_tokens=400), pending_prefill_tokens=0)
    choice = WorkLeftTokens().pick(call(), snapshot(a, b), "m", Prediction(10), PolicyStore())
    assert choice.chosen == "b" and choice.loads == {"a": 600.0, "b": 400.0}


def test_max_capacity_takes_the_engine_with_most_free_kv_that_holds_the_request_or_waits():
    roomy = replace(engine("a", "m"), kv_capacity_tokens=10_000, kv_cache_usage=0.5)   # 5,000 free
    fuller = replace(engine("b", "m"), kv_capacity_tokens=10_000, kv_cache_usage=0.8)  # 2,000 free
    the_call = call(input_tokens=1000, max_tokens=8192)
    assert MaxCapacity().pick(the_call, snapshot(roomy, fuller), "m", Prediction(500), PolicyStore()).chosen == "a"
    with pytest.raises(WaitForCapacity) as wait:
        MaxCapacity().pick(the_call, snapshot(roomy, fuller), "m", Prediction(4500), PolicyStore())
    assert wait.value.retry_after_s == 1.0


def test_max_capacity_with_reserved_room_counts_what_in_flight_calls_will_hold_at_their_end():
    growing = (InFlightCall(1000, 3000.0, 0.0),)  # 1,000 KV tokens held now, 4,000 at its end
    roomy = replace(engine("a", "m"), kv_capacity_tokens=10_000, kv_cache_usage=0.1, in_flight_calls=growing)
    fuller = replace(engine("b", "m"), kv_capacity_tokens=10_000, kv_cache_usage=0.3)  # 7,000 free, no calls known
    reserved = MaxCapacity(room="reserved", retry_s=0.02)
    assert reserved.reads_in_flight_calls and not MaxCapacity().reads_in_flight_calls
    choice = reserved.pick(call(input_tokens=1000, max_tokens=8192), snapshot(roomy, fuller), "m", Prediction(500),
                           PolicyStore())
    assert choice.chosen == "b" and choice.loads == {"a": 6000.0, "b": 7000.0}  # "a" is 9,000 free now
    with pytest.raises(WaitForCapacity) as wait:
        reserved.pick(call(input_tokens=1000, max_tokens=8192), snapshot(roomy, fuller), "m", Prediction(6500),
                      PolicyStore())
    assert wait.value.retry_after_s == 0.02
    with pytest.raises(ValueError, match="room must be one of"):
        MaxCapacity(room="later")


def test_min_min_adds_queued_work_to_the_calls_own_time_at_its_decode_upper_bound():
    idle = engine("a", "m", in_flight_cost_s=3.0, engine_profile=PROFILE)
    busy = engine("b", "m", in_flight_cost_s=0.5, engine_profile=PROFILE)
    short = Prediction(20, {0.1: 5, 0.9: 40})
    choice = MinMin().pick(call(input_tokens=200, max_tokens=64), snapshot(idle, busy), "m", short, PolicyStore())
    assert choice.chosen == "b" and choice.params["decode_upper_tokens"] == 40
    assert choice.scores["b"] == pytest.approx(0.5 + PROFILE.isolated_request_s(200, 40))


def test_dedicated_small_large_sends_heavy_decodes_to_the_first_half_only():
    engines = [engine(f"e{i}", "m", engine_profile=PROFILE) for i in range(4)]
    heavy = Prediction(5e3 / PROFILE.decode_ms_per_token + 1)  # just over 5 s of decode
    picker = DedicatedSmallLarge()
    the_call = call(max_tokens=8192)
    heavy_choice = picker.pick(the_call, snapshot(*engines), "m", heavy, PolicyStore())
    light_choice = picker.pick(the_call, snapshot(*engines), "m", Prediction(10), PolicyStore())
    assert heavy_choice.chosen in {"e0", "e1"} and heavy_choice.rule == "dedicated:heavy-decode"
    assert light_choice.chosen in {"e2", "e3"} and light_choice.rule == "dedicated:light-decode"
    assert picker.pick(the_call, snapshot(engines[0]), "m", heavy, PolicyStore()).chosen == "e0"


def test_each_baseline_sizes_the_call_itself_not_its_workflows_remaining_tokens():
    """A workflow predicted to produce 4,000 more tokens over its four stages left: this call's share is
    1,000 (``call_output_tokens``), "this particular request" of C.3.2 and C.3.3."""
    first_of_four = call(input_tokens=1000, max_tokens=8192, stage_index=1, stage_count=4)
    workflow = Prediction(4000, {0.5: 4000, 0.9: 8000})
    roomy = replace(engine("a", "m", engine_profile=PROFILE), kv_capacity_tokens=10_000, kv_cache_usage=0.75)
    assert MaxCapacity().pick(first_of_four, snapshot(roomy), "m", workflow, PolicyStore()).chosen == "a"  # 2,000
    # of 2,500 free
    choice = MinMin().pick(first_of_four, snapshot(roomy), "m", workflow, PolicyStore())
    assert choice.params["decode_upper_tokens"] == 2000
    engines = [engine(f"e{i}", "m", engine_profile=PROFILE) for i in range(4)]
    per_call = Prediction(4 * (5e3 / PROFILE.decode_ms_per_token) - 4)  # a call's share just under 5 s of decode
    assert DedicatedSmallLarge().pick(first_of_four, snapshot(*engines), "m", per_call, PolicyStore()).rule == \
        "dedicated:light-decode"
