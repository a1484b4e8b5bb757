"""LL/LH/HL/HH from the engine's profiled prefill and decode times (load-balancer paper, section 3)."""

import pytest

from hetflow.core.engine.profile import load_profile
from hetflow.core.rl_router.request_class import ClassThresholds, decode_s, prefill_s, request_class

V100_LIKE = load_profile("qwen2.5-7b-instruct@l4")
H100 = load_profile("qwen2.5-7b-instruct@h100-80g")


def test_a_request_is_classed_by_its_prefill_and_decode_time_on_the_engine():
    prompt = int(0.5e3 / V100_LIKE.prefill_ms_per_token) + 1  # just over 0.5 s of prefill
    decode = int(5e3 / V100_LIKE.decode_ms_per_token) + 1    # just over 5 s of decode
    assert prefill_s(prompt, V100_LIKE) >= 0.5 and decode_s(decode, V100_LIKE) >= 5.0
    assert request_class(prompt, decode, V100_LIKE) == "HH"
    assert request_class(prompt, 1, V100_LIKE) == "HL"
    assert request_class(1, decode, V100_LIKE) == "LH"
    assert request_class(1, 1, V100_LIKE) == "LL"


def test_the_same_prompt_is_heavy_on_a_slow_gpu_and_light_on_a_fast_one():
    prompt = int(0.5e3 / V100_LIKE.prefill_ms_per_token) + 1
    assert request_class(prompt, 1, V100_LIKE)[0] == "H" and request_class(prompt, 1, H100)[0] == "L"


def test_thresholds_are_parameters():
    assert request_class(100, 1, H100, ClassThresholds(heavy_prompt_s=1e-6)) == "HL"
    with pytest.raises(ValueError):
        ClassThresholds(heavy_prompt_s=0)
