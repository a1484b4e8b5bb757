"""The three doors' arithmetic: ratios to the server alone per round, and CPU time per process tree."""

from __future__ import annotations

import os

import pytest

from hetflow.bench.three_doors import cpu_of, server_work, summarize


def _row(r: int, door: str, rps: float, ttft: float) -> dict:
    return {"round": r, "door": door, "request_throughput": rps, "median_ttft_ms": ttft, "median_itl_ms": 10.0,
            "p99_itl_ms": 20.0}


def test_each_door_is_divided_by_the_server_alone_in_the_same_round_and_compared_with_the_router():
    rows = [_row(0, "alone", 10.0, 100.0), _row(0, "vllm-router", 9.0, 110.0), _row(0, "hetflow-direct", 6.0, 200.0),
            _row(1, "alone", 20.0, 50.0), _row(1, "vllm-router", 19.0, 50.0), _row(1, "hetflow-direct", 16.0, 75.0)]
    summary = summarize(rows, rounds=2)
    assert summary["hetflow-direct"]["request_throughput"]["rounds"] == [0.6, 0.8]
    assert summary["hetflow-direct"]["median_ttft_ms"]["median"] == pytest.approx(1.75)
    assert summary["hetflow-direct"]["throughput_vs_router"]["rounds"] == pytest.approx([6 / 9, 16 / 19])
    assert summary["vllm-router"]["throughput_vs_router"]["median"] == 1.0


def test_cpu_time_of_a_process_tree_grows_with_the_work_it_does():
    before = cpu_of({"me": os.getpid()})["me"]
    sum(i * i for i in range(3_000_000))
    assert cpu_of({"me": os.getpid()})["me"] > before


def test_server_work_gives_steps_and_the_tokens_a_step_computed_between_two_reads():
    before = {"vllm:num_preemptions_total": 2.0, "vllm:iteration_tokens_total_count": 100.0,
              "vllm:iteration_tokens_total_sum": 1_000.0}
    after = {"vllm:num_preemptions_total": 5.0, "vllm:iteration_tokens_total_count": 300.0,
             "vllm:iteration_tokens_total_sum": 2_800.0}
    assert server_work(before, after) == {"server_preemptions": 3.0, "server_steps": 200.0,
                                          "server_tokens_per_step": 9.0}
    assert server_work(before, before)["server_tokens_per_step"] == 0.0  # no step: no division



def test_an_unknown_door_is_one_line_naming_the_known_ones_before_any_server_starts(capsys):
    from hetflow.bench.three_doors import main

    with pytest.raises(SystemExit) as ended:
        main(["--doors", "vllm-router,sglang"])
    assert ended.value.code == 2
    assert "unknown door(s) sglang; known: vllm-router, hetflow-direct, hetflow-relay" in capsys.readouterr().err
