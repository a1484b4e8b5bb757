"""Roofline profiles: KV capacity from GPU memory minus weights, KV bytes from the architecture."""

import pytest

from hetflow.core.engine.profile import Architecture, load_profile


def test_kv_bytes_per_token_from_architecture():
    # Qwen2.5-7B: 28 layers, 4 KV heads, head_dim 128, bf16 -> 2*28*4*128*2 = 57344 bytes
    assert Architecture(params=7.62e9, layers=28, kv_heads=4, head_dim=128, max_model_len=1).kv_bytes_per_token == 57344


def test_larger_model_holds_fewer_kv_tokens_and_decodes_slower():
    small, large = load_profile("qwen2.5-1.5b-instruct@a6000"), load_profile("qwen2.5-7b-instruct@a6000")
    assert large.kv_capacity_tokens < small.kv_capacity_tokens
    assert large.decode_ms_per_token > small.decode_ms_per_token
    # 48 GiB * 0.9 - 1.5 GiB reserve - 15.24 GB weights, over 57344 B/token
    assert large.kv_capacity_tokens == pytest.approx(((48 * 0.9 - 1.5) * 2**30 - 15.24e9) / 57344, rel=1e-6)


def test_model_that_does_not_fit_is_refused():
    with pytest.raises(ValueError, match="does not fit"):
        load_profile("qwen2.5-14b-instruct@l4")


def test_unknown_profile_names_the_catalog():
    with pytest.raises(ValueError, match="built-in"):
        load_profile("nope@a100-80g")


def test_the_roofline_charges_a_prefill_chunk_for_its_attention_over_cached_tokens():
    """Prefix caching skips the prefix's own prefill, not the new tokens' attention over it (issue 32)."""
    profile = load_profile("qwen2.5-7b-instruct@a100-80g")
    alone, over_prefix = profile.step_ms(512, 0, 0), profile.step_ms(512, 0, 0, [(512, 16384)])
    assert over_prefix - alone == pytest.approx(profile.prefill_ms_per_context_pair * 512 * 16384)
    # 4 FLOPs per (query, key) pair per hidden unit per layer, at the measured attention efficiency
    assert profile.prefill_ms_per_context_pair == pytest.approx(4 * 3584 * 28 / (312e12 * 0.26) * 1e3)


def test_the_engine_overhead_is_its_own_parameter():
    profile = load_profile("qwen2.5-7b-instruct@a6000")
    assert profile.iteration_overhead_ms == 1.5
    # the weight reads and the layers' latency floor, no overhead
    assert profile.decode_base_ms == pytest.approx(15.24e9 / (768e9 * 0.92) * 1e3 + 28 * 0.052)
    slower = load_profile("qwen2.5-7b-instruct@a6000", iteration_overhead_ms=4.0)
    assert slower.step_ms(0, 16, 16000) - profile.step_ms(0, 16, 16000) == pytest.approx(2.5)
    assert slower.isolated_request_s(100, 11) - profile.isolated_request_s(100, 11) == pytest.approx(11 * 2.5e-3)


@pytest.mark.parametrize("spec", ["tiny-llama-cpu.yaml", {
    "name": "m@x", "model": "m", "gpu": "x", "prefill_ms_per_token": 0.1, "decode_base_ms": 10.0,
    "decode_ms_per_seq": 0.2, "decode_ms_per_batch_token": 0.001, "kv_capacity_tokens": 100000}])
def test_profiles_written_before_the_overhead_and_pair_terms_time_as_they_did(spec):
    """A profile YAML or inline fields without the new terms: overhead folded into decode_base_ms, no
    pair term, the four-coefficient step as before."""
    p = load_profile(spec)
    assert p.iteration_overhead_ms == 0.0 and p.prefill_ms_per_context_pair == 0.0 and p.operator_tables is None
    assert p.step_ms(300, 5, 5000, [(300, 4000)]) == pytest.approx(
        p.decode_base_ms + 300 * p.prefill_ms_per_token + 5 * p.decode_ms_per_seq + 5000 * p.decode_ms_per_batch_token)


@pytest.mark.parametrize("spec", ["qwen2.5-7b-instruct@l4", "qwen2.5-7b-instruct@h100-80g"])
def test_a_slowed_profile_times_every_iteration_by_its_factor_as_reported(spec):
    profile = load_profile(spec)
    slowed = profile.slowed(2.0)
    reported = profile.as_reported()
    assert slowed.operator_tables is None and slowed.kv_capacity_tokens == profile.kv_capacity_tokens
    for batch, context in ((1, 512), (64, 64 * 1024), (256, 256 * 4096)):
        assert slowed.step_ms(0, batch, context) == pytest.approx(2 * reported.step_ms(0, batch, context))
    assert slowed.step_ms(4096, 8, 8192) == pytest.approx(2 * reported.step_ms(4096, 8, 8192))
    assert profile.slowed(1.0) == reported
    with pytest.raises(ValueError, match="factor > 0"):
        profile.slowed(0.0)
