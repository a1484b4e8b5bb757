"""The baselines' rules on handmade snapshots: vLLM's load balancer, round robin, JSQ, FCFS, LTR."""

from dataclasses import replace

import pytest

from hetflow.core.policies.contracts import PolicyStore, Prediction
from hetflow.core.policies.fcfs import Fcfs
from hetflow.core.policies.least_load import LeastLoadEngine, LeastLoadModel, vllm_load
from hetflow.core.policies.round_robin import RoundRobinEngine, RoundRobinModel
from tests.factories import call, context, engine, snapshot


def busy(engine_id, model, waiting=0, running=0, in_flight=0, kv=0.0, dispatched=0):
    return replace(engine(engine_id, model), waiting=waiting, running=running, in_flight_requests=in_flight,
                   kv_cache_usage=kv, dispatched_since_report=dispatched)


@pytest.mark.parametrize("waiting, running, in_flight, kv, dispatched, expected", [
    (3, 2, 0, 0.0, 0, 5.0),                 # waiting + running
    (0, 2, 6, 0.0, 0, 6.0),                 # the in-flight count is the floor (vLLM: client_count * inflight)
    (3, 2, 0, 0.5, 0, 5.0),                 # no KV penalty at or below half-full
    (3, 2, 0, 0.75, 0, 5.0 + 3 * 6 * 0.25),  # waiting x 6 x (usage - 0.5)
    (4, 0, 0, 1.0, 0, 4.0 + 4 * 3.0),       # 3x waiting when full
    (1, 2, 0, 1.0, 2, 5.0 + 3 * 3.0),       # dispatches since the last report count as waiting
    (0, 3, 0, 1.0, 0, 3.0),                 # no waiting, no penalty
])
def test_the_load_is_vllm_0_32s(waiting, running, in_flight, kv, dispatched, expected):
    assert vllm_load(busy("a", "m", waiting, running, in_flight, kv, dispatched)) == pytest.approx(expected)


def test_least_load_picks_the_engine_then_its_model_across_the_pool():
    snap = snapshot(busy("s0", "small", 4, 8), busy("l0", "large", 1, 2), busy("s1", "small", 0, 9))
    choice = LeastLoadModel().pick(call(), snap, {}, {}, PolicyStore())
    assert choice.chosen == "large" and choice.rule == "vllm-least-load:engine-first"
    assert LeastLoadEngine().pick(call(), snap, "small", Prediction(1), PolicyStore()).chosen == "s1"


def test_equal_loads_rotate_the_scan_start_so_ties_spread():
    snap = snapshot(engine("b", "m"), engine("a", "m"), engine("c", "m"))
    store, picker = PolicyStore(), LeastLoadEngine()
    assert [picker.pick(call(), snap, "m", Prediction(1), store).chosen for _ in range(4)] == ["a", "b", "c", "a"]


def test_a_queue_on_a_full_cache_is_avoided():
    snap = snapshot(busy("full", "m", waiting=2, running=1, kv=0.95), busy("roomy", "m", running=4, kv=0.2))
    assert LeastLoadEngine().pick(call(), snap, "m", Prediction(1), PolicyStore()).chosen == "roomy"


def test_round_robin_cycles_in_engine_order_with_the_turn_in_the_store():
    snap = snapshot(engine("b", "m"), engine("a", "m"), engine("c", "m", healthy=False))
    store, picker = PolicyStore(), RoundRobinEngine()
    assert [picker.pick(call(), snap, "m", Prediction(1), store).chosen for _ in range(4)] == ["a", "b", "a", "b"]
    snap2 = snapshot(engine("x", "small"), engine("y", "large"))
    models = RoundRobinModel()
    assert [models.pick(call(), snap2, {}, {}, store).chosen for _ in range(3)] == ["small", "large", "small"]


def test_fcfs_gives_everyone_the_same_priority():
    short, long = Prediction(10), Prediction(1e4)
    assert Fcfs().priority(call(), short, context())[0] == Fcfs().priority(call(), long, context())[0]


def test_join_shortest_queue_counts_outstanding_requests_as_the_monitor_sees_them():
    from hetflow.core.policies.join_shortest_queue import ShortestQueueEngine, ShortestQueueModel

    snap = snapshot(busy("s0", "small", 0, 3, in_flight=5), busy("l0", "large", 1, 3), busy("s1", "small", 0, 4))
    assert ShortestQueueModel().pick(call(), snap, {}, {}, PolicyStore()).chosen == "large"  # 4 against 5 and 4: by id
    choice = ShortestQueueEngine().pick(call(), snap, "small", Prediction(1), PolicyStore())
    assert choice.chosen == "s1" and choice.loads == {"s0": 5.0, "s1": 4.0}


def test_ltr_orders_by_the_calls_own_predicted_length_not_the_workflows():
    from hetflow.core.policies.predicted_call_tokens import PredictedCallTokens
    from hetflow.core.policies.predicted_total_tokens import PredictedTotalTokens

    assert PredictedCallTokens.prediction_target == "call"
    assert PredictedTotalTokens.prediction_target == "workflow"
    short = PredictedCallTokens().priority(call(), Prediction(40), context())
    long = PredictedCallTokens().priority(call(), Prediction(900), context())
    assert short[0] < long[0] and short[1].rule == "ltr:predicted-call-tokens"
