"""The baselines' ordering rules on handmade snapshots: least load, round robin, FCFS."""

from dataclasses import replace

import pytest

from hetflow.core.policies import Prediction
from hetflow.core.policies.fcfs import Fcfs
from hetflow.core.policies.least_load import LeastLoadEngine, LeastLoadModel, load_score
from hetflow.core.policies.round_robin import RoundRobinEngine, RoundRobinModel
from tests.factories import call, engine, snapshot


def busy(engine_id, model, waiting, running, in_flight=0):
    return replace(engine(engine_id, model), waiting=waiting, running=running, in_flight_requests=in_flight)


@pytest.mark.parametrize("waiting, running, in_flight, weights, expected", [
    (3, 2, 0, (1, 1), 5),
    (3, 2, 0, (2, 0.5), 7),
    (0, 2, 6, (1, 1), 6),      # the monitor knows 4 more than the engine has reported
])
def test_load_score(waiting, running, in_flight, weights, expected):
    assert load_score(busy("a", "m", waiting, running, in_flight), *weights) == expected


def test_least_load_picks_the_engine_then_its_model_across_the_pool():
    snap = snapshot(busy("s0", "small", 4, 8), busy("l0", "large", 1, 2), busy("s1", "small", 0, 9))
    choice = LeastLoadModel().pick(call(), snap, {})
    assert choice.chosen == "large" and choice.rule == "least-load:engine-first"
    assert LeastLoadEngine().pick(call(), snap, "small").chosen == "s1"


def test_round_robin_cycles_in_engine_order():
    snap = snapshot(engine("b", "m"), engine("a", "m"), engine("c", "m", healthy=False))
    picker = RoundRobinEngine()
    assert [picker.pick(call(), snap, "m").chosen for _ in range(4)] == ["a", "b", "a", "b"]
    models = RoundRobinModel()
    snap2 = snapshot(engine("x", "small"), engine("y", "large"))
    assert [models.pick(call(), snap2, {}).chosen for _ in range(3)] == ["small", "large", "small"]


def test_fcfs_gives_everyone_the_same_priority():
    assert Fcfs().priority(call(), Prediction(10))[0] == Fcfs().priority(call(), Prediction(10_000))[0]


def test_join_shortest_queue_counts_outstanding_requests_as_the_monitor_sees_them():
    from hetflow.core.policies.join_shortest_queue import ShortestQueueEngine, ShortestQueueModel

    snap = snapshot(busy("s0", "small", 0, 3, in_flight=5), busy("l0", "large", 1, 3), busy("s1", "small", 0, 4))
    assert ShortestQueueModel().pick(call(), snap, {}).chosen == "large"     # 4 outstanding against 5 and 4: l0 < s1 by id
    choice = ShortestQueueEngine().pick(call(), snap, "small")
    assert choice.chosen == "s1" and choice.loads == {"s0": 5.0, "s1": 4.0}


def test_ltr_orders_by_the_calls_own_predicted_length_not_the_workflows():
    from hetflow.core.policies.predicted_call_tokens import PredictedCallTokens
    from hetflow.core.policies.predicted_total_tokens import PredictedTotalTokens

    assert PredictedCallTokens.prediction_target == "call"
    assert PredictedTotalTokens.prediction_target == "workflow"
    short, long = PredictedCallTokens().priority(call(), Prediction(40)), PredictedCallTokens().priority(call(), Prediction(900))
    assert short[0] < long[0] and short[1].rule == "ltr:predicted-call-tokens"
