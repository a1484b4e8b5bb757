"""The rival routers' engine choices, each on a case taken from its own documentation or code."""

from dataclasses import replace

from hetflow.core import plugins
from hetflow.core.policies import PolicyStore, Prediction
from hetflow.core.policies.kv_overlap_cost import dynamo_cost
from hetflow.core.presets import resolve
from tests.factories import call, engine, profile, snapshot

BS = 16


def test_dynamo_picks_the_lowest_cost_of_its_docs_example():
    """docs/architecture/kv_cache_routing.md, "Cost Calculation": W1 = 1.0*8+10 = 18, W2 = 1.0*5+5 = 10
    (selected), W3 = 1.0*2+9 = 11. A 4-block prompt; prefill and decode blocks set as in the example."""
    prompt = replace(call(input_tokens=4 * BS), prefix_blocks=(1, 2, 3, 4))

    def worker(name, overlap, pending_blocks, used_blocks):
        return replace(engine(name, "m", engine_profile=profile(block_size=BS)), prefix_match_blocks=overlap,
                       pending_prefill_tokens=pending_blocks * BS, kv_cache_usage=used_blocks * BS / 1600,
                       kv_capacity_tokens=1600)

    workers = [worker("w1", 0, 4, 6), worker("w2", 2, 3, 3), worker("w3", 4, 2, 9)]
    assert [round(dynamo_cost(prompt, w, 1.0, BS), 6) for w in workers] == [18.0, 10.0, 11.0]
    choice = plugins.build("engine-picker", "kv-overlap-cost").pick(prompt, snapshot(*workers), "m",
                                                                    Prediction(1.0), PolicyStore())
    assert choice.chosen == "w2"


def sglang(*engines, blocks=(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)):
    prompt = replace(call(), prefix_blocks=blocks)
    return plugins.build("engine-picker", "cache-aware").pick(prompt, snapshot(*engines), "m", Prediction(1.0),
                                                              PolicyStore())


def test_sglang_balances_first_when_load_is_imbalanced():
    """cache_aware.rs: max - min > 64 and max > 1.5 min -> the least loaded, whatever the cache holds."""
    holder = replace(engine("a", "m", in_flight_requests=100), prefix_match_blocks=10)
    idle = engine("b", "m", in_flight_requests=10)
    assert sglang(holder, idle).chosen == "b" and sglang(holder, idle).rule == "sglang:imbalanced:least-load"


def test_sglang_follows_the_cache_above_its_threshold_and_load_below():
    holder = replace(engine("a", "m", in_flight_requests=30), prefix_match_blocks=4)     # 40% > 30%
    other = engine("b", "m", in_flight_requests=5)
    assert sglang(holder, other).chosen == "a"
    weak = replace(holder, prefix_match_blocks=3)                                          # 30%: not above
    assert sglang(weak, other).chosen == "b" and sglang(weak, other).rule == "sglang:cache-miss:least-load"


def test_llm_d_default_profile_weights_prefix_three_to_queue_and_kv_two_each():
    """llm-d's defaults.go: queue x2, kv-cache-utilization x2, prefix-cache x3: a full prefix hit (3) beats
    an empty queue and cache elsewhere (2 + 2 = 4) only when the holder is not far worse on both."""
    stage = resolve("llm-d").policy.engine
    picker = plugins.build("engine-picker", stage.type, stage.params)
    prompt = replace(call(), prefix_blocks=(1, 2))
    holder = replace(engine("a", "m"), prefix_match_blocks=2, waiting=2, kv_cache_usage=0.5)
    idle = replace(engine("b", "m"), waiting=0, kv_cache_usage=0.0)
    busy = replace(engine("c", "m"), waiting=4, kv_cache_usage=1.0)
    choice = picker.pick(prompt, snapshot(holder, idle, busy), "m", Prediction(1.0), PolicyStore())
    assert choice.scores == {"a": 3 + 2 * 0.5 + 2 * 0.5, "b": 4.0, "c": 0.0} and choice.chosen == "a"
    loaded = replace(holder, waiting=4, kv_cache_usage=0.9)
    assert picker.pick(prompt, snapshot(loaded, idle), "m", Prediction(1.0), PolicyStore()).chosen == "b"
