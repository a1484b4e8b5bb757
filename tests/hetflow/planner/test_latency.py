"""Sim(w_i, f_i) on hetflow's engine model (Cascadia appendix B)."""

import math

import pytest

from hetflow.core.engine.profile import load_profile
from hetflow.planner.latency import LengthSample, capacity_per_s, p95_latency_s

PROFILE = load_profile("qwen2.5-7b-instruct@h100-80g")
LENGTHS = [LengthSample(200 + 37 * k % 900, 40 + 53 * k % 300) for k in range(50)]


def test_latency_grows_with_load_and_falls_with_replicas():
    light = p95_latency_s(PROFILE, 1, 1, LENGTHS, 1.0, requests=120)
    heavy = p95_latency_s(PROFILE, 1, 1, LENGTHS, 0.8 * capacity_per_s(PROFILE, LENGTHS), requests=120)
    shared = p95_latency_s(PROFILE, 2, 1, LENGTHS, 0.8 * capacity_per_s(PROFILE, LENGTHS), requests=120)
    alone = max(PROFILE.isolated_request_s(s.input_tokens, s.output_tokens) for s in LENGTHS)
    assert 0.5 * alone < light < heavy and shared < heavy


def test_a_rate_past_capacity_is_unstable_and_a_rate_of_zero_costs_nothing():
    assert p95_latency_s(PROFILE, 1, 1, LENGTHS, 1.01 * capacity_per_s(PROFILE, LENGTHS)) == math.inf
    assert math.isfinite(p95_latency_s(PROFILE, 2, 1, LENGTHS, 1.01 * capacity_per_s(PROFILE, LENGTHS), requests=60))
    assert p95_latency_s(PROFILE, 1, 1, LENGTHS, 0.0) == 0.0


def test_a_request_longer_than_the_model_allows_makes_the_allocation_unusable():
    assert p95_latency_s(PROFILE, 1, 1, [LengthSample(40000, 10)], 0.5, requests=5) == math.inf


def test_the_fast_path_gives_the_references_p95():
    """The planner simulates with decode runs (issue 32); stepping every iteration gives the same p95."""
    lengths = [LengthSample(300 + 37 * i, 40 + 23 * i) for i in range(12)]
    for rate in (20.0, 60.0):
        fast = p95_latency_s(PROFILE, 1, 1, lengths, rate, requests=200)
        assert fast == pytest.approx(p95_latency_s(PROFILE, 1, 1, lengths, rate, requests=200, decode_runs=False),
                                     rel=1e-9)
