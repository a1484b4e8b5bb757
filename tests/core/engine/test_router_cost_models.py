"""vLLM's router's cost models fitted to an engine profile, and the cache-miss impact they price."""

import pytest

from hetflow.core.engine.profile import load_profile
from hetflow.core.engine.router_cost_models import calibrate
from tests.factories import profile


def test_a_linear_profiles_decode_cost_is_recovered_exactly():
    linear = profile(decode_base_ms=6.0, decode_ms_per_seq=0.04, decode_ms_per_batch_token=0.0002,
                     kv_capacity_tokens=1 << 20, max_num_seqs=256, iteration_overhead_ms=1.5)
    fit = calibrate(linear)
    assert fit.decode_fixed_step_s == pytest.approx(7.5e-3, rel=1e-9)
    assert fit.decode_step_s_per_request == pytest.approx(4e-5, rel=1e-9)
    assert fit.decode_step_s_per_context_token == pytest.approx(2e-7, rel=1e-9)
    assert fit.decode_max_error < 1e-9


def test_the_prefill_the_router_is_fitted_to_runs_in_chunks_each_attending_to_the_earlier_ones():
    engine = profile(max_num_batched_tokens=512, prefill_ms_per_context_pair=1e-5)
    assert engine.isolated_request_s(300, 1) == pytest.approx(engine.step_ms(300, 0, 0) / 1e3)
    two_chunks = engine.step_ms(512, 0, 0) + engine.step_ms(88, 0, 0, ((88, 512),))
    assert engine.isolated_request_s(600, 1) == pytest.approx(two_chunks / 1e3)


def test_the_measured_h100_profile_fits_the_routers_forms_within_its_reported_error():
    fit = calibrate(load_profile("qwen2.5-7b-instruct@h100-80g"))
    assert 0 < fit.prefill_max_error < 0.10 and 0 < fit.decode_max_error < 0.10  # the measured tables bend
    assert min(fit.prefill_intercept_s, fit.prefill_s_per_1k_tokens, fit.decode_fixed_step_s) > 0


def test_a_cache_miss_costs_the_fitted_cold_prefill_with_the_decode_it_slows():
    fit = calibrate(load_profile("qwen2.5-7b-instruct@h100-80g"))
    x = 4.0
    cold_s = fit.prefill_intercept_s + fit.prefill_s_per_1k_tokens * x + fit.prefill_s_per_1k_tokens_squared * x * x
    assert fit.cache_miss_impact_s(4000) == pytest.approx(cold_s * 1.85)
    assert fit.cache_miss_impact_s(0) == 0.0
