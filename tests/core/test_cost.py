"""HexGen-Flow's arithmetic: eq. 2 against the engine model, eq. 5 with an overrun carried over
(figure 3), and eq. 7-8's urgency order kept by a heap at every dequeue."""

import random

import pytest

from hetflow.core.cost import (
    call_output_tokens,
    compute_cost_s,
    mean_compute_cost_s,
    slo_budget_s,
    urgency_order_key,
    urgency_s,
    workload_balanced_score,
)
from hetflow.core.engine.aging_queue import AgingPriorityQueue
from hetflow.core.policies.contracts import Prediction
from tests.factories import call, engine, profile, request


def test_compute_cost_is_the_request_alone_on_the_engine_profile():
    fast, slow = profile(decode_base_ms=5.0), profile(decode_base_ms=20.0)
    assert compute_cost_s(engine("f", "m", engine_profile=fast), 100, 50) == fast.isolated_request_s(100, 50)
    assert compute_cost_s(engine("s", "m", engine_profile=slow), 100, 50) > compute_cost_s(
        engine("f", "m", engine_profile=fast), 100, 50)
    pair = [engine("f", "m", engine_profile=fast), engine("s", "m", engine_profile=slow)]
    assert mean_compute_cost_s(pair, 100, 50) == pytest.approx(
        (fast.isolated_request_s(100, 50) + slow.isolated_request_s(100, 50)) / 2)


def test_budgets_follow_eq5_and_an_overrun_tightens_later_stages():
    slo_s, mean_costs_s = 20.0, [2.0, 4.0, 4.0]   # t-bar_comp of stages 1..3 (eq. 6)
    b1 = slo_budget_s(slo_s - 0.0, mean_costs_s[0], sum(mean_costs_s))
    assert b1 == pytest.approx(4.0)                # 20 * 2 / 10
    elapsed = 6.0                                   # stage 1 overran its 4 s budget by 2 s (figure 3)
    b2 = slo_budget_s(slo_s - elapsed, mean_costs_s[1], sum(mean_costs_s[1:]))
    assert b2 == pytest.approx(7.0)                # 14 * 4 / 8, not the 8 s it had without the overrun
    assert b2 < slo_budget_s(slo_s - b1, mean_costs_s[1], sum(mean_costs_s[1:]))
    elapsed += 7.0
    assert slo_budget_s(slo_s - elapsed, mean_costs_s[2], mean_costs_s[2]) == pytest.approx(7.0)
    assert slo_budget_s(-1.0, 1.0, 2.0) < 0         # past the deadline: negative budget, most urgent


def test_heap_order_equals_argmax_urgency_at_every_dequeue():
    rng = random.Random(7)
    queue = AgingPriorityQueue(starvation_threshold=10**9, running_quantum=1)
    waiting, now, served = {}, 0.0, 0
    for step in range(400):
        now += rng.expovariate(5.0)
        if rng.random() < 0.6 or not waiting:
            cost, budget = rng.uniform(0.1, 5.0), rng.uniform(-2.0, 30.0)
            req = request(priority=urgency_order_key(cost, budget, now), arrival_s=now)
            waiting[req.request_id] = (cost, budget, now)
            queue.push(req, step)
        else:
            best = max(waiting, key=lambda rid: urgency_s(waiting[rid][0], waiting[rid][1], now - waiting[rid][2]))
            got = queue.pop()
            assert urgency_s(*waiting[got.request_id][:2], now - waiting[got.request_id][2]) == pytest.approx(
                urgency_s(*waiting[best][:2], now - waiting[best][2]))
            del waiting[got.request_id]
            served += 1
    assert served > 100


def test_workload_balanced_score_trades_queue_against_speed():
    idle_slow = workload_balanced_score(queue_s=0.0, compute_s=9.0, alpha=0.0, beta=1.0)
    busy_fast = workload_balanced_score(queue_s=30.0, compute_s=1.0, alpha=0.0, beta=1.0)
    assert idle_slow > busy_fast                    # alpha 0: queues only
    assert workload_balanced_score(0.0, 9.0, 1.0, 1.0) < workload_balanced_score(30.0, 1.0, 1.0, 1.0)  # alpha 1: speed


def test_a_calls_output_estimate_is_never_more_than_its_max_tokens():
    c = call(stage_index=1, stage_count=2)  # max_tokens 16
    assert call_output_tokens(c, Prediction(10_000.0)) == 16
    assert call_output_tokens(c, Prediction(20.0)) == 10
