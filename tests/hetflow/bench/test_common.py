"""The stability check: a growing queue is flagged, one heavy-tailed workflow is not; a bench's choice of
names; JSON lines that survive an interruption."""

import argparse

import pytest

from hetflow.bench.common import append_json_line, chosen, json_lines
from hetflow.core.stats import stability


def test_a_growing_queue_is_unstable():
    latencies = [1.0 + 0.05 * i for i in range(200)]
    assert not stability(latencies)["stable"]


def test_one_huge_workflow_in_the_second_half_does_not_flag_the_run():
    latencies = [1.0] * 200
    latencies[150] = 500.0   # raises the second half's mean ~3.5x, not its median
    result = stability(latencies)
    assert result["ratio"] > 2 and result["median_ratio"] == 1.0 and result["stable"]


def test_a_warm_up_from_an_empty_system_is_not_a_growing_queue_once_it_is_left_out():
    warm_up = [1.0 + 0.1 * k for k in range(30)]             # filling up: latency rises, then stays
    latencies = warm_up + [6.0] * 60
    assert not stability(latencies)["stable"]
    assert stability(latencies, warmup_share=1 / 3)["stable"]
    growing = [1.0 + 0.1 * k for k in range(90)]
    assert not stability(growing, warmup_share=1 / 3)["stable"]


def test_a_choice_is_the_names_given_and_an_unknown_one_is_one_line_naming_the_known(capsys):
    parser = argparse.ArgumentParser(prog="bench")
    assert chosen(parser, "b,a", ("a", "b", "c"), "door") == ["b", "a"]
    with pytest.raises(SystemExit):
        chosen(parser, "a,z", ("a", "b"), "door")
    assert "unknown door(s) z; known: a, b" in capsys.readouterr().err


def test_sigterm_runs_the_finally_blocks_that_stop_a_harness_stacks():
    import os
    import signal

    from hetflow.bench.common import exit_on_sigterm

    before = signal.getsignal(signal.SIGTERM)
    stopped = []
    try:
        exit_on_sigterm()
        with pytest.raises(SystemExit) as ended:
            try:
                os.kill(os.getpid(), signal.SIGTERM)  # its Python handler runs before the next bytecode
                stopped.append("went on")
            finally:
                stopped.append("stack down")
        assert ended.value.code == 128 + signal.SIGTERM and stopped == ["stack down"]
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_line_cut_off_by_an_interruption_is_skipped_and_the_next_starts_its_own(tmp_path):
    path = tmp_path / "journal" / "lines.jsonl"
    assert list(json_lines(path)) == []
    append_json_line(path, {"a": 1})
    path.write_text(path.read_text() + '{"b": ')          # cut off mid-write
    append_json_line(path, {"c": (2, 3)})
    assert list(json_lines(path)) == [{"a": 1}, {"c": [2, 3]}]
