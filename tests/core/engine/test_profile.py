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
