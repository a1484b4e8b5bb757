"""Each engine scorer on handmade snapshots: values in [0, 1], higher better."""

from dataclasses import replace

import pytest

from hetflow.core import plugins
from hetflow.core.call import LlmCall
from hetflow.core.policies.contracts import PolicyStore, Prediction
from hetflow.core.policies.scorers.spread_prefix_affinity import FirstCallPrefixes
from tests.factories import call, engine, profile, snapshot


def score(name: str, engines, for_call: LlmCall | None = None, store: PolicyStore | None = None, **params):
    scorer = plugins.build("engine-scorer", name, params)
    return scorer.score(for_call or call(), list(engines), snapshot(*engines), Prediction(100.0),
                        store or PolicyStore())


def test_prefix_affinity_is_the_share_of_leading_blocks_held():
    blocks = call()
    blocks = replace(blocks, prefix_blocks=tuple(range(10)))
    engines = [replace(engine("a", "m"), prefix_match_blocks=10), replace(engine("b", "m"), prefix_match_blocks=4),
               engine("c", "m")]
    assert score("prefix-affinity", engines, blocks) == {"a": 1.0, "b": 0.4, "c": 0.0}
    assert score("prefix-affinity", engines, blocks, max_prefix_blocks=5) == {"a": 1.0, "b": 0.8, "c": 0.0}
    assert score("prefix-affinity", engines) == {"a": 0.0, "b": 0.0, "c": 0.0}     # a call without blocks


def test_program_affinity_scores_a_continuing_call_as_prefix_affinity_and_a_first_call_nowhere():
    blocks = replace(call(), prefix_blocks=tuple(range(10)))
    engines = [replace(engine("a", "m"), prefix_match_blocks=9), engine("b", "m")]
    scorer = plugins.build("engine-scorer", "program-affinity", {})
    first = snapshot(*engines)
    continuing = replace(first, program_dispatches=(("a", 900),))
    assert scorer.score(blocks, engines, first, Prediction(1.0), PolicyStore()) == {"a": 0.0, "b": 0.0}
    assert scorer.score(blocks, engines, continuing, Prediction(1.0), PolicyStore()) == {"a": 0.9, "b": 0.0}


def test_program_affinity_with_a_fill_tolerance_scores_first_calls_only_where_programs_fill_no_more_than_the_mean():
    blocks = replace(call(), prefix_blocks=tuple(range(10)))
    # engine factory KV: 100,000 tokens; "a" holds the prefix and is the fullest, "b" half holds it
    engines = [replace(engine("a", "m"), prefix_match_blocks=10, resident_tokens=30_000),
               replace(engine("b", "m"), prefix_match_blocks=5, resident_tokens=10_000),
               replace(engine("c", "m"), resident_tokens=5_000)]
    first = snapshot(*engines)                                   # mean fill 0.15
    tolerant = plugins.build("engine-scorer", "program-affinity", {"first_call_fill_tolerance": 1.0})
    strict = plugins.build("engine-scorer", "program-affinity", {"first_call_fill_tolerance": 0.5})
    assert tolerant.score(blocks, engines, first, Prediction(1.0), PolicyStore()) == {"a": 1.0, "b": 0.5, "c": 0.0}
    assert strict.score(blocks, engines, first, Prediction(1.0), PolicyStore()) == {"a": 0.0, "b": 0.5, "c": 0.0}
    continuing = replace(first, program_dispatches=(("a", 900),))  # a continuing call keeps its affinity
    assert strict.score(blocks, engines, continuing, Prediction(1.0), PolicyStore())["a"] == 1.0


def test_program_affinity_refuses_a_negative_fill_tolerance():
    with pytest.raises(ValueError, match="first_call_fill_tolerance"):
        plugins.build("engine-scorer", "program-affinity", {"first_call_fill_tolerance": -0.1})


def test_program_home_with_room_scores_only_the_home_and_only_while_its_kv_takes_the_call():
    continuing = replace(call(input_tokens=1_000, max_tokens=500), prefix_blocks=tuple(range(10)))
    home, other = replace(engine("a", "m"), prefix_match_blocks=8), replace(engine("b", "m"), prefix_match_blocks=10)
    scorer = plugins.build("engine-scorer", "program-home-with-room", {})

    def scored(home_view):
        views = [home_view, other]
        at = replace(snapshot(*views), program_dispatches=(("a", 900),))
        return scorer.score(continuing, views, at, Prediction(100.0), PolicyStore())

    assert scored(home) == {"a": 0.8, "b": 0.0}           # the home's cached share; another engine's cache draws none
    # the call adds 200 uncached prompt tokens and 100 of output (Prediction's median over one stage left)
    assert scored(replace(home, kv_cache_usage=0.997)) == {"a": 0.8, "b": 0.0}     # 99,700 + 300: just fits
    assert scored(replace(home, kv_cache_usage=0.998)) == {"a": 0.0, "b": 0.0}
    assert scored(replace(home, kv_cache_usage=0.99, pending_prefill_tokens=800)) == {"a": 0.0, "b": 0.0}
    assert scored(replace(home, kv_cache_usage=0.99, pending_prefill_tokens=700)) == {"a": 0.8, "b": 0.0}
    first = snapshot(home, other)
    assert scorer.score(continuing, [home, other], first, Prediction(100.0), PolicyStore()) == {"a": 0.0, "b": 0.0}


def test_program_home_with_room_keeps_room_under_its_kv_fraction_and_refuses_one_out_of_range():
    continuing = replace(call(input_tokens=1_000, max_tokens=500), prefix_blocks=tuple(range(10)))
    home = replace(engine("a", "m"), prefix_match_blocks=10, kv_cache_usage=0.85)
    at = replace(snapshot(home), program_dispatches=(("a", 900),))
    for kv_fraction, expected in ((0.9, 1.0), (0.85, 0.0)):
        scorer = plugins.build("engine-scorer", "program-home-with-room", {"kv_fraction": kv_fraction})
        assert scorer.score(continuing, [home], at, Prediction(100.0), PolicyStore()) == {"a": expected}
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match="kv_fraction"):
            plugins.build("engine-scorer", "program-home-with-room", {"kv_fraction": bad})


def first_call(*blocks: int) -> LlmCall:
    return replace(call(), prefix_blocks=blocks)


def active(view, programs: int = 300):
    """The engine with ``programs`` active programs whose last call went to it."""
    return replace(view, resident_programs=programs)


def test_spread_prefix_affinity_draws_by_a_prefix_few_programs_share_and_not_by_one_all_share():
    """System prompt blocks 1-2 in every first call; schema blocks 10-11 or 20-21, each in half of them."""
    scorer = plugins.build("engine-scorer", "spread-prefix-affinity", {"engine_share_tolerance": 0.0})
    store = PolicyStore()
    engines = [active(replace(engine("a", "m"), prefix_match_blocks=4)),
               replace(engine("b", "m"), prefix_match_blocks=2),
               engine("c", "m"), engine("d", "m")]   # a holds system prompt and schema, b the system prompt
    for schema in (10, 20, 10, 20):
        scorer.score(first_call(1, 2, schema, schema + 1, 99), engines, snapshot(*engines), Prediction(1.0), store)
    # the system prompt is in all four first calls, more than a quarter (one engine's share of four): the
    # head; the schema is in half, also more than a quarter, so no engine draws either
    new = first_call(1, 2, 10, 11, 98)
    assert scorer.score(new, engines, snapshot(*engines), Prediction(1.0), store) == {
        "a": 0.0, "b": 0.0, "c": 0.0, "d": 0.0}
    # on two engines one engine's share is half: the schema (in 3 of 5 first calls now) still is more
    two = engines[:2]
    assert scorer.score(new, two, snapshot(*two), Prediction(1.0), store) == {"a": 0.0, "b": 0.0}
    # among schemas each carried by a quarter of the first calls, the schema draws its programs
    for schema in (30, 40, 50, 60, 30, 40, 50, 60, 30, 40, 50):
        scorer.score(first_call(1, 2, schema, schema + 1, 97), engines, snapshot(*engines), Prediction(1.0), store)
    scores = scorer.score(first_call(1, 2, 60, 61, 96), [replace(engines[0], prefix_match_blocks=4), *engines[1:]],
                          snapshot(*engines), Prediction(1.0), store)
    assert scores == {"a": 0.4, "b": 0.0, "c": 0.0, "d": 0.0}   # 2 of the call's 5 blocks beyond the head


def test_spread_prefix_affinity_counts_a_call_decided_again_once_and_keeps_a_programs_own_context():
    scorer = plugins.build("engine-scorer", "spread-prefix-affinity", {"window_first_calls": 2})
    store = PolicyStore()
    engines = [active(replace(engine("a", "m"), prefix_match_blocks=5)), engine("b", "m")]
    held = first_call(1, 2, 3)
    for _ in range(5):  # a held call decided five times counts once
        scorer.score(held, engines, snapshot(*engines), Prediction(1.0), store)
    scorer.score(first_call(7, 8), engines, snapshot(*engines), Prediction(1.0), store)
    assert prefixes(store).carriers[1] == 1 and len(prefixes(store).recent) == 2
    scorer.score(first_call(9), engines, snapshot(*engines), Prediction(1.0), store)   # the window drops the first
    assert 1 not in prefixes(store).carriers          # forgotten, not kept at 0
    # a continuing call: its own context (blocks no first call carries) is matched as prefix-affinity does
    continuing = replace(snapshot(*engines), program_dispatches=(("a", 80),))
    assert scorer.score(first_call(4, 5, 6, 7, 8), engines, continuing, Prediction(1.0), store) == {"a": 1.0, "b": 0.0}
    assert len(prefixes(store).recent) == 2                                # and is not recorded


def test_spread_prefix_affinity_counts_popularity_over_as_many_first_calls_as_programs_are_active():
    """Eight programs with prompts of their own, all ended; then agent programs sharing a system prompt
    (blocks 1-2): with only the new ones active the system prompt is popular at once, where a window of
    the last 256 first calls would hold the eight and find it in too few."""
    scorer = plugins.build("engine-scorer", "spread-prefix-affinity", {})
    store = PolicyStore()
    engines = [replace(engine(e, "m"), prefix_match_blocks=2 if e == "a" else 0) for e in "abcd"]
    for own in range(8):     # each of the eight active while the next starts
        scorer.score(first_call(100 + own, 200 + own), engines, snapshot(active(engines[0], own), *engines[1:]),
                     Prediction(1.0), store)
    now_active = [active(engines[0], 2), *engines[1:]]   # the eight have ended; two agent programs run
    for agent in range(2):
        scorer.score(first_call(1, 2, 300 + agent), engines, snapshot(*now_active), Prediction(1.0), store)
    scores = scorer.score(first_call(1, 2, 400), engines, snapshot(*now_active), Prediction(1.0), store)
    assert scores == {"a": 0.0, "b": 0.0, "c": 0.0, "d": 0.0}            # the shared head draws nowhere
    assert len(prefixes(store).recent) == 3
    # the same calls with the eight still counted (a window that does not follow the active programs)
    stale = PolicyStore()
    for own in range(8):
        scorer.score(first_call(100 + own, 200 + own), engines, snapshot(active(engines[0], 64), *engines[1:]),
                     Prediction(1.0), stale)
    busy = [active(engines[0], 64), *engines[1:]]
    for agent in range(2):
        scorer.score(first_call(1, 2, 300 + agent), engines, snapshot(*busy), Prediction(1.0), stale)
    assert scorer.score(first_call(1, 2, 400), engines, snapshot(*busy), Prediction(1.0), stale)["a"] == 2 / 3


def test_spread_prefix_affinity_refuses_an_empty_window_and_a_negative_tolerance():
    with pytest.raises(ValueError, match="window_first_calls"):
        plugins.build("engine-scorer", "spread-prefix-affinity", {"window_first_calls": 0})
    with pytest.raises(ValueError, match="engine_share_tolerance"):
        plugins.build("engine-scorer", "spread-prefix-affinity", {"engine_share_tolerance": -1.0})


def test_queue_is_min_max_normalised_and_all_ones_when_equal():
    engines = [replace(engine(e, "m"), waiting=w) for e, w in (("a", 0), ("b", 5), ("c", 10))]
    assert score("queue", engines) == {"a": 1.0, "b": 0.5, "c": 0.0}
    assert score("queue", [replace(e, waiting=3) for e in engines]) == {"a": 1.0, "b": 1.0, "c": 1.0}
    sent = [replace(engines[0], dispatched_since_report=20), engines[1], engines[2]]
    assert score("queue", sent)["a"] == 1.0 and score("queue", sent, count_dispatched=True)["a"] == 0.0


def test_kv_utilization_prefers_the_emptier_cache():
    engines = [replace(engine("a", "m"), kv_cache_usage=0.2), replace(engine("b", "m"), kv_cache_usage=0.9)]
    values = score("kv-utilization", engines)
    assert values["a"] == 0.8 and round(values["b"], 6) == 0.1


def test_in_flight_tokens_prefers_the_least_predicted_work():
    engines = [engine("a", "m", in_flight_tokens=100), engine("b", "m", in_flight_tokens=300),
               engine("c", "m", in_flight_tokens=500)]
    assert score("in-flight-tokens", engines) == {"a": 1.0, "b": 0.5, "c": 0.0}


def test_workload_balanced_follows_eq_4_with_the_stores_alpha():
    fast, slow = profile(decode_base_ms=2.0), profile(decode_base_ms=40.0)
    engines = [engine("fast", "m", in_flight_cost_s=8.0, engine_profile=fast),
               engine("slow", "m", in_flight_cost_s=2.0, engine_profile=slow)]
    assert score("workload-balanced", engines, store=PolicyStore(alpha=0.0)) == {"fast": 0.0, "slow": 1.0}
    assert score("workload-balanced", engines, store=PolicyStore(alpha=1.0)) == {"fast": 1.0, "slow": 0.0}


def prefixes(store: PolicyStore) -> FirstCallPrefixes:
    """The spread scorer's own state, under its name in the store."""
    found: FirstCallPrefixes = store.plugin_state["spread-prefix-affinity"]
    return found
