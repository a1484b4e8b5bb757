"""vLLM's router configured as its docs say: cost models fitted to the engine profile, every time
constant scaled with the pool, program identity vLLM's server accepts."""

import json

import pytest

from hetflow.bench.vllm_router import (
    DOCUMENTED_TIMES_S,
    agentic_context,
    calibrate,
    program_scheduling_config,
    router_command,
)
from hetflow.core.engine.profile import load_profile
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


def test_the_documented_configuration_scales_every_time_constant_with_the_pool():
    engine = load_profile("qwen2.5-7b-instruct@h100-80g")
    gpu, slow = program_scheduling_config(engine), program_scheduling_config(engine, time_scale=10.0)
    assert gpu["global_queue"] is True and gpu["resume_order"] == "mru"
    assert gpu["token_capacity_per_dp_rank"] == slow["token_capacity_per_dp_rank"] == engine.kv_capacity_tokens
    for name, seconds in DOCUMENTED_TIMES_S.items():
        assert gpu[name] == seconds and slow[name] == pytest.approx(10 * seconds)
    for model in ("prefill_cost_model", "decode_throughput_model"):
        for key, value in gpu[model].items():
            expected = value if key == "decode_throughput_alpha" else 10 * value
            assert slow[model][key] == pytest.approx(expected)


def test_program_identity_travels_as_a_json_string_that_says_whether_it_blocks_a_parent():
    lead = json.loads(agentic_context("p1", 0)["agentic_context"])
    sub = json.loads(agentic_context("p1:coder", 2, parent_program_id="p1", expected_resume=False,
                                     blocks_parent=True, expected_output_length=64)["agentic_context"])
    assert lead == {"program_id": "p1", "step_id": 0, "expected_resume": True, "blocks_parent": False}
    assert sub["blocks_parent"] is True and sub["parent_program_id"] == "p1" and sub["expected_output_length"] == 64
    with pytest.raises(ValueError, match="parent_program_id"):
        agentic_context("p1", 0, blocks_parent=True)


def test_program_scheduling_flags_appear_only_with_a_configuration():
    plain = router_command(["http://a:1"], 9000, 9001, policy="round_robin", binary="vllm-router")
    programs = router_command(["http://a:1", "http://b:2"], 9000, 9001, program_config={"global_queue": True},
                              binary="vllm-router")
    assert "--enable-program-scheduling" not in plain and "round_robin" in plain
    assert programs[programs.index("--program-scheduling-config-json") + 1] == '{"global_queue":true}'
    assert programs[programs.index("--worker-urls") + 1:programs.index("--policy")] == ["http://a:1", "http://b:2"]
