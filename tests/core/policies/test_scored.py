"""The scored engine picker: filters, weighted scorers, the highest total, and a receipt of every value."""

from dataclasses import replace

import pytest

from hetflow.core import plugins
from hetflow.core.policies.contracts import PolicyStore, Prediction, WaitForCapacity
from tests.factories import call, engine, snapshot


def picker(**params):
    return plugins.build("engine-picker", "scored", params)


def test_the_weighted_sum_decides_and_the_receipt_shows_every_scorer():
    with_prefix = replace(call(), prefix_blocks=(1, 2, 3, 4))
    holder = replace(engine("a", "m"), prefix_match_blocks=4, waiting=6)
    idle = replace(engine("b", "m"), waiting=0)
    view = snapshot(holder, idle)
    affinity_first = picker(scorers={"prefix-affinity": 3, "queue": 2})
    choice = affinity_first.pick(with_prefix, view, "m", Prediction(10.0), PolicyStore())
    assert choice.chosen == "a" and choice.scores == {"a": 3.0, "b": 2.0}
    assert choice.scorers == {"prefix-affinity": {"a": 1.0, "b": 0.0}, "queue": {"a": 0.0, "b": 1.0}}
    assert choice.params == {"weight:prefix-affinity": 3.0, "weight:queue": 2.0}
    queue_first = picker(scorers={"prefix-affinity": 1, "queue": {"weight": 2}})
    assert queue_first.pick(with_prefix, view, "m", Prediction(10.0), PolicyStore()).chosen == "b"


def test_ties_take_turns_in_id_order():
    scored = picker(scorers={"kv-utilization": 1})
    store = PolicyStore()
    view = snapshot(engine("b", "m"), engine("a", "m"))
    assert [scored.pick(call(), view, "m", Prediction(1.0), store).chosen for _ in range(3)] == ["a", "b", "a"]


def test_the_memory_filter_keeps_only_engines_with_room_and_holds_the_call_when_none_has():
    big = call(input_tokens=900)
    full = replace(engine("full", "m"), kv_capacity_tokens=1000, kv_ledger_tokens=(500.0,) * 20)
    roomy = replace(engine("roomy", "m"), kv_capacity_tokens=1000, prefix_match_blocks=0)
    favourite = replace(full, prefix_match_blocks=8)
    scored = picker(filters=["memory-fit"], scorers={"prefix-affinity": 1})
    with_prefix = replace(big, prefix_blocks=tuple(range(8)))
    assert scored.plans_memory
    assert scored.pick(with_prefix, snapshot(favourite, roomy), "m", Prediction(10.0), PolicyStore()).chosen == "roomy"
    with pytest.raises(WaitForCapacity):
        scored.pick(with_prefix, snapshot(favourite), "m", Prediction(10.0), PolicyStore())


def test_bad_configurations_are_refused():
    with pytest.raises(ValueError, match="at least one scorer"):
        picker(scorers={})
    with pytest.raises(ValueError, match="weight"):
        picker(scorers={"queue": -1})
    with pytest.raises(ValueError, match="unknown engine-scorer"):
        picker(scorers={"nope": 1})
    with pytest.raises(ValueError, match="unknown engine-filter"):
        picker(scorers={"queue": 1}, filters=["nope"])


def test_a_scored_stage_with_eq_4_starts_the_store_at_its_alpha():
    assert picker(scorers={"workload-balanced": {"weight": 1, "alpha": 0.3}}).initial_alpha == 0.3
    assert picker(scorers={"queue": 1}).initial_alpha is None


def test_only_a_stage_that_reads_prefixes_asks_the_snapshot_to_match_them():
    assert picker(scorers={"prefix-affinity": 1, "queue": 1}).reads_prefix
    assert not picker(scorers={"queue": 1, "kv-utilization": 1}).reads_prefix
    assert plugins.build("engine-picker", "kv-overlap-cost").reads_prefix
    assert not plugins.build("engine-picker", "least-load").reads_prefix
