"""The RL router's state vector (load-balancer paper, 4.3, C.10) on handmade snapshots."""

from dataclasses import replace

import pytest

from hetflow.core.rl_router.decode_bucket import DQN_BUCKETS
from hetflow.core.rl_router.state import (
    NextRequest,
    instance_features,
    iteration_s,
    permute_actions,
    permute_instances,
    phases,
    state_dim,
    state_vector,
)
from hetflow.core.snapshot import InFlightCall
from tests.factories import engine, profile

PROFILE = profile(max_num_seqs=4, kv_capacity_tokens=10_000)
SHORT = InFlightCall(prompt_tokens=1000, predicted_tokens=100, admitted_s=0.0)   # bucket 0
LONG = InFlightCall(prompt_tokens=500, predicted_tokens=3000, admitted_s=0.5)    # bucket 2
NEWEST = InFlightCall(prompt_tokens=1000, predicted_tokens=300, admitted_s=0.9)  # dispatched since the report


def busy_engine(**fields):
    view = replace(engine("e0", "m", max_batch_size=4, in_flight_requests=3, engine_profile=PROFILE),
                   in_flight_calls=(SHORT, LONG, NEWEST), waiting=0, dispatched_since_report=1,
                   kv_capacity_tokens=10_000, kv_cache_usage=0.1)
    return replace(view, **fields)


def test_the_newest_calls_as_many_as_waiting_or_sent_since_the_report_are_in_their_prompt_phase():
    assert phases(busy_engine()) == ([NEWEST], [SHORT, LONG])
    assert phases(busy_engine(waiting=1)) == ([LONG, NEWEST], [SHORT])
    assert phases(busy_engine(waiting=9)) == ([SHORT, LONG, NEWEST], [])


def test_an_instance_counts_its_phases_and_buckets_its_capacity_and_earliest_completion():
    view = busy_engine()
    step_s = iteration_s(view, [SHORT, LONG])
    assert step_s == pytest.approx(PROFILE.step_ms(0, 2, int(1000 + 50 + 500 + 1500)) / 1e3)
    prompt, b0, b1, b2, capacity, earliest = instance_features(view, 0.3, DQN_BUCKETS)
    assert (prompt, b0, b1, b2) == (0.25, 0.25, 0.0, 0.25)
    assert capacity == 0.25  # one free slot of four binds before the KV's 0.9
    produced = 0.3 / step_s  # one token per iteration since its admit at 0
    assert 0 < produced < 100 and earliest == pytest.approx(round((100 - produced) * step_s, 2))


def test_capacity_is_the_free_kv_when_it_binds_less_what_is_dispatched_but_not_prefilled():
    view = busy_engine(in_flight_requests=0, kv_cache_usage=0.5, pending_prefill_tokens=2000)
    assert instance_features(view, 1.0, DQN_BUCKETS)[4] == pytest.approx(0.3)


def test_the_state_is_the_queue_then_each_instance_with_six_values_each():
    idle = replace(engine("e", "m", max_batch_size=128, engine_profile=PROFILE))
    vector = state_vector(600, NextRequest(2048, 300), [idle] * 4, 0.0, DQN_BUCKETS, max_model_len=4096)
    assert len(vector) == state_dim(4, DQN_BUCKETS) == 4 + 4 * 6
    assert vector[:4] == [1.0, 1.0, 0.5, 0.5]  # w_q capped at 4 x 128, p_t of 4096, bucket 1 of 0..2
    assert vector[4:10] == [0.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    assert state_vector(0, None, [idle], 0.0, DQN_BUCKETS, 4096)[:4] == [0.0, 0.0, 0.0, 0.0]


def test_relabelling_the_instances_moves_their_rows_and_keeps_the_queue():
    state = [0.1, 1.0, 0.2, 0.5] + [1.0] * 6 + [2.0] * 6 + [3.0] * 6
    assert permute_instances(state, [2, 0, 1], DQN_BUCKETS) == [0.1, 1.0, 0.2, 0.5] + [3.0] * 6 + [1.0] * 6 + [2.0] * 6
    assert permute_actions([2, 0, 3], [2, 0, 1]) == [0, 1, 3]  # instance 2 is row 0 now; 3 is no action
