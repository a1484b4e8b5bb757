"""The RL router's state vector (load-balancer paper, 4.3, C.10) on handmade instances."""

import pytest

from hetflow.core.rl_router.decode_bucket import DQN_BUCKETS
from hetflow.core.rl_router.state import InFlight, InstanceView, NextRequest, instance_features, state_vector

PREFILLING = InFlight(prompt_tokens=1000, prefilled_tokens=200, output_tokens=0, predicted_decode_tokens=100)
SHORT = InFlight(1000, 1000, output_tokens=50, predicted_decode_tokens=100)    # bucket 0, 50 left
LONG = InFlight(500, 500, output_tokens=100, predicted_decode_tokens=3000)     # bucket 2


def test_an_instance_counts_its_phases_and_buckets_its_capacity_and_earliest_completion():
    view = InstanceView((PREFILLING, SHORT, LONG), max_num_seqs=4, free_kv_share=0.9, iteration_s=0.02)
    prompt, b0, b1, b2, capacity, earliest = instance_features(view, DQN_BUCKETS)
    assert (prompt, b0, b1, b2) == (0.25, 0.25, 0.0, 0.25)
    assert capacity == 0.25  # one free slot of four binds before the KV
    assert earliest == pytest.approx(50 * 0.02)


def test_the_state_is_the_queue_then_each_instance_with_six_values_each():
    idle = InstanceView((), max_num_seqs=128, free_kv_share=1.0, iteration_s=0.02)
    vector = state_vector(600, NextRequest(2048, 1), [idle] * 4, DQN_BUCKETS, max_model_len=4096)
    assert len(vector) == 4 + 4 * 6
    assert vector[:4] == [1.0, 1.0, 0.5, 0.5]  # w_q capped at 4 x 128, p_t of 4096, bucket 1 of 0..2
    assert vector[4:10] == [0.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    assert state_vector(0, None, [idle], DQN_BUCKETS, 4096)[:4] == [0.0, 0.0, 0.0, 0.0]
