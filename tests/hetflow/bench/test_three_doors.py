"""The three doors' arithmetic: ratios to the server alone per round, and CPU time per process tree."""

from __future__ import annotations

import os

import pytest

from hetflow.bench.three_doors import cpu_of, server_work, summarize


def _row(r: int, door: str, rps: float, ttft: float, itl: float = 10.0) -> dict:
    return {"round": r, "door": door, "request_throughput": rps, "median_ttft_ms": ttft, "median_itl_ms": itl,
            "p99_itl_ms": 2 * itl}


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



def test_the_inter_token_time_a_door_adds_is_its_own_less_the_server_alones_in_the_same_round():
    rows = [_row(0, "alone", 10.0, 100.0, itl=4.0), _row(0, "hetflow-direct", 8.0, 120.0, itl=5.0),
            _row(1, "alone", 10.0, 100.0, itl=3.0), _row(1, "hetflow-direct", 8.0, 120.0, itl=6.0),
            _row(2, "alone", 10.0, 100.0, itl=2.0), _row(2, "hetflow-direct", 8.0, 120.0, itl=4.5)]
    summary = summarize(rows, rounds=3)["hetflow-direct"]
    assert summary["added_median_itl_ms"]["rounds"] == pytest.approx([1.0, 3.0, 2.5])
    assert summary["added_median_itl_ms"]["median"] == pytest.approx(2.5)
    assert summary["added_p99_itl_ms"]["median"] == pytest.approx(5.0)


def test_server_cpus_that_leave_no_core_for_the_doors_are_refused_before_any_server_starts():
    from hetflow.bench.three_doors import main

    every_core = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
    with pytest.raises(ValueError, match="proper subset"):
        main(["--server-cpus", every_core, "--doors", "vllm-router"])


def test_an_unknown_door_is_one_line_naming_the_known_ones_before_any_server_starts(capsys):
    from hetflow.bench.three_doors import main

    with pytest.raises(SystemExit) as ended:
        main(["--doors", "vllm-router,sglang"])
    assert ended.value.code == 2
    assert "unknown door(s) sglang; known: vllm-router, hetflow-direct, hetflow-relay" in capsys.readouterr().err
