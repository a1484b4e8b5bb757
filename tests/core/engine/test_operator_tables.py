"""Profiles composed from the vendored H100/H200 operator measurements (issue 32)."""

import statistics

import numpy as np
import pytest

from hetflow.core.engine.operator_tables import ATTENTION_EFFICIENCY, Curve, measured_file, measured_models
from hetflow.core.engine.profile import ITERATION_OVERHEAD_MS, EngineProfile, load_profile

MEASURED = [(gpu, model) for gpu in ("h100-80g", "h200") for model in measured_models(gpu)]
QWEN7B_H100 = "qwen2.5-7b-instruct@h100-80g"


def test_both_gpus_carry_all_five_measured_architectures_with_their_provenance():
    assert len(MEASURED) == 10
    for gpu in ("h100-80g", "h200"):
        provenance = measured_file(gpu)["provenance"]
        assert provenance["measured_on"] == "2026-11-26" and provenance["device"].startswith("NVIDIA H")
        assert any("overhead" in item for item in provenance["leaves_out"])


@pytest.mark.parametrize("gpu, model", MEASURED)
def test_the_tables_reproduce_every_named_composed_point(gpu, model):
    """The shared file's composed step times at its named points, within 5% (the issue's bound); the
    composition is the same, so the error is rounding only."""
    profile = load_profile(f"{model}@{gpu}")
    for point in measured_file(gpu)["models"][model]["named_points"]:
        chunks = [(point["P"], 0)] if point["P"] else []
        composed = profile.operator_tables.step_ms(chunks, point["B"], point["B"] * (point["C"] or 0))
        assert composed == pytest.approx(point["ms"], rel=0.05)
        assert composed == pytest.approx(point["ms"], rel=1e-9)


def test_a_measured_profile_times_an_iteration_as_its_tables_plus_the_engines_overhead():
    profile = load_profile(QWEN7B_H100)
    assert profile.source == "measured-operators" and profile.iteration_overhead_ms == ITERATION_OVERHEAD_MS
    gpu_ms = profile.operator_tables.step_ms([(512, 2048)], 64, 64 * 2048)
    assert profile.step_ms(512, 64, 64 * 2048, [(512, 2048)]) == pytest.approx(gpu_ms + ITERATION_OVERHEAD_MS)
    slower = load_profile(QWEN7B_H100, iteration_overhead_ms=3.0)
    assert slower.step_ms(0, 8, 8000) - profile.step_ms(0, 8, 8000) == pytest.approx(1.5)


def test_the_roofline_stays_reachable_for_a_measured_gpu():
    roofline = load_profile(QWEN7B_H100 + "/roofline")
    assert roofline.source == "roofline" and roofline.operator_tables is None
    assert roofline.kv_capacity_tokens == load_profile(QWEN7B_H100).kv_capacity_tokens


def test_a_gpu_without_measurements_keeps_the_roofline():
    assert load_profile("qwen2.5-7b-instruct@a100-80g").operator_tables is None
    assert load_profile("qwen2.5-3b-instruct@h200").operator_tables is None  # an architecture not measured


def test_the_measured_knee_that_the_linear_form_misses():
    """Small decode batches are memory-bound: 32 sequences cost little more than one, then the cost
    grows; the fitted linear coefficients cannot follow that at both ends."""
    tables = load_profile(QWEN7B_H100).operator_tables
    one, thirty_two, full = (tables.step_ms([], b, b * 1024) for b in (1, 32, 256))
    assert thirty_two / one < 1.2 and full / thirty_two > 1.9


def test_attention_over_a_cached_prefix_is_charged_from_the_measured_table():
    tables = load_profile(QWEN7B_H100).operator_tables
    measured = {(n, c): ms for n, c, ms in measured_file("h100-80g")["models"]["qwen2.5-7b-instruct"]
                ["prefix_attn_ms_per_layer"]}
    for (n, c), ms in measured.items():
        no_prefix = tables.prefill_attn_per_layer.at(n)
        assert no_prefix + tables.prefix_extra(n, c) == pytest.approx(ms + no_prefix - measured[(n, 0)], rel=1e-9)
    # A 512-token chunk over 16k cached tokens: its attention alone costs more than its GEMMs (README).
    over_16k = tables.layers * (tables.prefill_attn_per_layer.at(512) + tables.prefix_extra(512, 16384))
    assert over_16k == pytest.approx(12.84, rel=0.01) and over_16k > tables.layers * tables.gemm_per_layer.at(512)


def test_between_measured_chunk_sizes_the_prefix_cost_is_linear_in_the_queries():
    tables = load_profile(QWEN7B_H100).operator_tables
    low, high = tables.prefix_extra(512, 16384), tables.prefix_extra(2048, 16384)
    assert tables.prefix_extra(1280, 16384) == pytest.approx((low + high) / 2)


def test_where_the_prefix_was_not_measured_a_roofline_term_charges_it():
    tables = load_profile("qwen2.5-7b-instruct@h200").operator_tables
    assert tables.prefix_extra_rows == ()
    assert tables.prefix_extra(512, 16384) == pytest.approx(tables.prefix_ms_per_token_pair_per_layer * 512 * 16384)
    assert tables.prefix_extra(512, 16384) == pytest.approx(2 * tables.prefix_extra(512, 8192))


def test_the_attention_efficiency_is_the_measured_tables_mean():
    """The roofline term's efficiency: each measured chunk's FLOPs over its prefix, per second of its time
    beyond the no-prefix chunk, as a share of the H100's 989 TFLOP/s, averaged."""
    shares = []
    for model in ("qwen2.5-7b-instruct", "qwen2.5-14b-instruct"):
        values = measured_file("h100-80g")["models"][model]
        base = {n: ms for n, c, ms in values["prefix_attn_ms_per_layer"] if c == 0}
        shares += [4 * values["heads"] * values["head_dim"] * n * c / ((ms - base[n]) / 1e3) / 989e12
                   for n, c, ms in values["prefix_attn_ms_per_layer"] if c]
    assert ATTENTION_EFFICIENCY == pytest.approx(statistics.mean(shares), abs=0.005)


def test_a_curve_interpolates_in_log_size_holds_below_and_continues_above():
    curve = Curve.of([(1, 1.0), (4, 3.0), (8, 4.0)])
    assert curve.at(2) == pytest.approx(2.0)  # half way in log(x)
    assert curve.at(0.5) == 1.0
    assert curve.at(16) == pytest.approx(6.0)  # the last segment's slope, 0.25 per unit
    xs = np.array([0.5, 1, 2, 3, 8, 16])
    assert curve.at_many(xs) == pytest.approx([curve.at(x) for x in xs])


@pytest.mark.parametrize("spec", [QWEN7B_H100, "qwen2.5-7b-instruct@a6000"])
def test_a_decode_run_is_the_sum_of_its_iterations(spec):
    profile = load_profile(spec)
    ends = profile.decode_run_ms(batch=24, context_tokens=24 * 3000, iterations=400)
    steps = [profile.step_ms(0, 24, 24 * 3000 + 24 * k) for k in range(400)]
    assert ends[0] == 0 and ends[1:] == pytest.approx(np.cumsum(steps), rel=1e-12)


@pytest.mark.parametrize("spec", [QWEN7B_H100, "qwen2.5-7b-instruct@a6000"])
def test_an_isolated_request_is_its_chunked_prefill_then_its_decodes(spec):
    profile = load_profile(spec, max_num_batched_tokens=2048)
    prompt, cached, output = 5000, 1000, 300
    chunks = [(2048, 1000), (1952, 3048)]
    expected = sum(profile.step_ms(n, 0, 0, [(n, c)]) for n, c in chunks)
    expected += sum(profile.step_ms(0, 1, prompt + k) for k in range(output - 1))
    assert profile.isolated_request_s(prompt, output, cached) == pytest.approx(expected / 1e3, rel=1e-9)


def test_a_measured_profile_round_trips_through_its_fields_by_reference():
    profile = load_profile(QWEN7B_H100, max_num_seqs=128)
    values = profile.to_dict()
    assert values["operator_tables"] == {"gpu": "h100-80g", "model": "qwen2.5-7b-instruct"}
    again = load_profile(values)
    assert again.operator_tables is profile.operator_tables and again.max_num_seqs == 128
    assert again.step_ms(300, 20, 20000) == profile.step_ms(300, 20, 20000)


def test_an_unknown_table_reference_is_refused():
    with pytest.raises(ValueError, match="no measured operator tables"):
        EngineProfile.from_dict({**load_profile(QWEN7B_H100).to_dict(),
                                 "operator_tables": {"gpu": "a100-80g", "model": "qwen2.5-7b-instruct"}})
