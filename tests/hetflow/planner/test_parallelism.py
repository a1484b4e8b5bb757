"""Replicas under tensor and pipeline parallelism (Cascadia 3.2, appendix B)."""

from dataclasses import replace

import pytest

from hetflow.core.engine.profile import catalog_architecture, catalog_gpu, load_profile
from hetflow.planner.parallelism import Parallelism, fits, strategies, virtual_engine_profile

QWEN7B, QWEN72B = catalog_architecture("qwen2.5-7b-instruct"), catalog_architecture("qwen2.5-72b-instruct")
H100 = catalog_gpu("h100-80g")


def profile(arch, gpu, tp, pp, gpu_name="h100-80g"):
    return virtual_engine_profile("m", gpu_name, arch, gpu, tp, pp)


def test_one_gpu_is_the_catalog_roofline_profile():
    """The planner derives every replica by the roofline, the measured GPUs' too (their tables cover one
    GPU without tensor parallelism), so that strategies compare like with like."""
    one, catalog = profile(QWEN7B, H100, 1, 1), load_profile("qwen2.5-7b-instruct@h100-80g/roofline")
    for field in ("decode_base_ms", "iteration_overhead_ms", "prefill_ms_per_token", "prefill_ms_per_context_pair",
                  "decode_ms_per_seq", "decode_ms_per_batch_token", "kv_capacity_tokens"):
        assert getattr(one, field) == pytest.approx(getattr(catalog, field))


def test_tensor_parallelism_speeds_an_iteration_less_than_linearly_and_less_over_a_slower_link():
    def speed_up(gpu, name, t):
        one, many = profile(QWEN7B, gpu, 1, 1, name), profile(QWEN7B, gpu, t, 1, name)
        return one.step_ms(0, 64, 64 * 1000) / many.step_ms(0, 64, 64 * 1000)

    two, four = speed_up(H100, "h100-80g", 2), speed_up(H100, "h100-80g", 4)
    assert 1 < two < 2 and two < four < 4  # K(N) < N: all-reduces, and every layer's latency floor stays
    over_pcie = replace(H100, link_gb_s=32.0)
    assert speed_up(over_pcie, "h100-80g", 4) < speed_up(H100, "h100-80g", 4)  # all-reduces over PCIe cost more


def test_pipeline_stages_hold_more_kv_but_do_not_shorten_an_iteration():
    one, two = profile(QWEN7B, H100, 1, 1), profile(QWEN7B, H100, 1, 2)
    assert two.step_ms(0, 8, 8000) >= one.step_ms(0, 8, 8000)
    assert 2 * two.kv_capacity_tokens > one.kv_capacity_tokens  # two virtual engines, weights halved per GPU


def test_memory_decides_what_fits():
    assert not fits(QWEN72B, H100, 1, 1) and fits(QWEN72B, H100, 2, 1) and fits(QWEN72B, H100, 1, 2)
    with pytest.raises(ValueError, match="does not fit on TP=1 x PP=1"):
        profile(QWEN72B, H100, 1, 1)
    assert profile(QWEN72B, H100, 4, 1).kv_capacity_tokens > 10 * profile(QWEN72B, H100, 2, 1).kv_capacity_tokens


def test_strategies_use_at_most_the_allocation_with_as_many_replicas_as_fit():
    six = strategies(6)
    assert Parallelism(6, 1, 1) in six and Parallelism(1, 4, 1) in six and Parallelism(3, 1, 2) in six
    assert all(s.gpus <= 6 and s.gpus + s.tp * s.pp > 6 for s in six)
    assert strategies(1) == [Parallelism(1, 1, 1)]
