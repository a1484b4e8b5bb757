"""Issue 16's benchmark harness: a run reports E2E, TTFT and TBT from the engines' token times, and the
table compares each policy with round robin seed by seed."""

import pytest

from hetflow.bench.rl_router import BASELINES, engine_choices, main, report, run_once
from hetflow.core.engine.profile import EngineSpec, load_profile
from hetflow.core.presets import PRESETS
from hetflow.workloads.requests import independent_requests

PROFILE = load_profile("qwen2.5-1.5b-instruct@a6000")


def test_a_run_reports_latency_first_token_and_time_between_tokens():
    engines = [EngineSpec(f"e{i}", PROFILE.model, PROFILE) for i in range(2)]
    records = independent_requests(30, seed=0, families=("math",), models=[PROFILE.model])
    run = run_once(engines, engine_choices(["round-robin"], None)["round-robin"], records, rate_per_s=5.0)
    assert run["requests"] == 30 and run["rejected"] == 0
    assert 0 < run["ttft_mean_s"] < run["e2e_mean_s"] and run["tbt_mean_ms"] > 0
    assert run["ttft_p95_s"] >= run["ttft_mean_s"] * 0.5


def test_the_table_gives_each_policys_cut_against_round_robin_per_seed():
    def row(policy, seed, e2e):
        fixed = {"e2e_mean_s": e2e, "ttft_mean_s": 1.0, "tbt_mean_ms": 50.0, "queueing_share": 0.1,
                 "preemptions": 0, "stable": True}
        return {"policy": policy, "seed": seed, "fixed_rate": fixed, "capacity": {"rate_per_s": e2e}}

    rows = [row("round-robin", 0, 10.0), row("round-robin", 1, 20.0), row("rl-router", 0, 9.0),
            row("rl-router", 1, 19.0)]
    table = report(rows).splitlines()
    rl = next(line for line in table if line.startswith("rl-router"))
    assert "+7.5 (+5.0-+10.0)%" in rl and "2/2" in rl  # 10% and 5% lower, both runs stable
    alone = next(line for line in report(rows[2:]).splitlines() if line.startswith("rl-router"))
    assert "%" not in alone  # no round robin runs: no cut to give


def test_policies_have_the_names_every_harness_gives_them():
    """One vocabulary (issue 32): the benchmark's baselines are hetflow's presets, run as their engine stage."""
    choices = engine_choices([*BASELINES, "llm-d", "rl-router"], "rl.pt")
    assert all(choices[name] == PRESETS[name].policy.engine for name in (*BASELINES, "llm-d"))
    assert choices["least-load"].type == "least-load" and choices["jsq"].type == "join-shortest-queue"
    assert choices["max-capacity-reserved"].params == {"room": "reserved", "retry_s": 0.02}
    assert choices["rl-router"].params == {"policy": "rl.pt"}


def test_an_unknown_policy_name_is_one_line_that_lists_the_known_ones(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["-c", "bench/clusters/paper-v100.yaml", "--policies", "least-load,vllm-least-load"])
    message = str(exit_.value)
    assert "unknown policy 'vllm-least-load'" in message and "least-load, hetflow" in message
    assert "\n" not in message
    with pytest.raises(ValueError, match="rl-router needs --policy-file"):
        engine_choices(["rl-router"], None)
