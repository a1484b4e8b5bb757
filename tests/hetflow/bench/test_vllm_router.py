"""vLLM's router configured as its docs say: cost models fitted to the engine profile, every time
constant scaled with the pool, program identity vLLM's server accepts."""

import json

import pytest

from hetflow.bench.vllm_router import (
    DOCUMENTED_TIMES_S,
    agentic_context,
    program_scheduling_config,
    router_command,
)
from hetflow.core.engine.profile import load_profile


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
