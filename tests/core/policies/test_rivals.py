"""The rival routers' engine choices, each on a case taken from its own documentation or code."""

from dataclasses import replace

from hetflow.core import plugins
from hetflow.core.policies.contracts import PolicyStore, Prediction
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


def vllm_router(policy, *engines, program_id="p1", request_id=None, blocks=(1, 2, 3, 4)):
    prompt = replace(call(program_id=program_id), prefix_blocks=blocks)
    if request_id:
        prompt = replace(prompt, request_id=request_id)
    stage = resolve(policy).policy.engine
    return plugins.build("engine-picker", stage.type, stage.params).pick(prompt, snapshot(*engines), "m",
                                                                         Prediction(1.0), PolicyStore())


def test_vllm_routers_cache_aware_takes_the_least_loaded_of_the_best_matches():
    """vllm-project/router cache_aware.rs: balanced and best rate above 0.3 -> the least loaded among the
    workers with the best rate (SGLang's takes the first of them)."""
    first = replace(engine("a", "m", in_flight_requests=20), prefix_match_blocks=4)
    second = replace(engine("b", "m", in_flight_requests=3), prefix_match_blocks=4)
    cold = engine("c", "m", in_flight_requests=0)
    assert vllm_router("vllm-router-cache-aware", first, second, cold).chosen == "b"
    assert sglang(first, second, cold, blocks=(1, 2, 3, 4)).chosen == "a"


def test_vllm_routers_power_of_two_keeps_the_less_loaded_of_two_different_draws():
    from hetflow.core.policies.power_of_two import two_draws

    draws = [two_draws(f"r{i}", 4) for i in range(2000)]
    assert all(i != j for i, j in draws) and {i for i, _ in draws} == {0, 1, 2, 3}
    pool = [engine(name, "m", in_flight_requests=load) for name, load in (("a", 9), ("b", 1), ("c", 5), ("d", 7))]
    for i in range(200):
        choice = vllm_router("vllm-router-power-of-two", *pool, request_id=f"r{i}")
        assert choice.chosen == min(choice.loads, key=choice.loads.get) and len(choice.loads) == 2
    # the busiest engine is never chosen: it loses every draw it is in
    assert "a" not in {vllm_router("vllm-router-power-of-two", *pool, request_id=f"r{i}").chosen for i in range(200)}


def test_vllm_routers_consistent_hash_keeps_a_session_on_one_worker_whatever_the_load():
    pool = [engine(name, "m") for name in "abcd"]
    homes = {p: vllm_router("vllm-router-consistent-hash", *pool, program_id=p).chosen for p in map(str, range(200))}
    assert set(homes.values()) == set("abcd")                       # sessions spread over the ring
    loaded = [replace(e, in_flight_requests=100) if e.engine_id == homes["7"] else e for e in pool]
    assert vllm_router("vllm-router-consistent-hash", *loaded, program_id="7").chosen == homes["7"]
    down = [replace(e, healthy=False) if e.engine_id == homes["7"] else e for e in pool]
    fallback = vllm_router("vllm-router-consistent-hash", *down, program_id="7")
    assert fallback.chosen == min(set("abcd") - {homes["7"]}) and "target-down" in fallback.rule
    # a worker that leaves moves only its own sessions (the ring's point)
    three = [e for e in pool if e.engine_id != "a"]
    moved = {p for p, home in homes.items()
             if vllm_router("vllm-router-consistent-hash", *three, program_id=p).chosen != home}
    assert moved == {p for p, home in homes.items() if home == "a"}
