"""``hetflow simulate``: a trace replayed on a stack config's cluster, the fast path's figures the
reference's, and a trace that does not fit the cluster refused in one line."""

import json

import pytest

from hetflow.cli import main
from hetflow.core.trace import write_jsonl
from hetflow.workloads.generate import generate

CONFIG = "examples/local-sim.yaml"  # qwen2.5-1.5b-instruct x2 and qwen2.5-7b-instruct


def _simulate(trace, capsys, *extra):
    assert main(["simulate", "--trace", str(trace), "-c", CONFIG, "--router", "oracle", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_trace_replays_on_the_configs_cluster_and_the_fast_path_agrees(tmp_path, capsys):
    trace = tmp_path / "code.jsonl"
    write_jsonl(generate("code", 40, seed=2, models=("qwen2.5-1.5b-instruct", "qwen2.5-7b-instruct"),
                         rate_per_s=4.0), trace)
    reference, fast = _simulate(trace, capsys, "--reference"), _simulate(trace, capsys)
    assert reference["programs"] == fast["programs"] == 40 and reference["rejected_calls"] == 0
    assert fast["latency_s"]["mean"] == pytest.approx(reference["latency_s"]["mean"], rel=1e-9)


def test_a_trace_without_lengths_for_a_served_model_is_refused_in_one_line(tmp_path, capsys):
    trace = tmp_path / "other.jsonl"
    write_jsonl(generate("code", 5, seed=2, models=("qwen2.5-1.5b-instruct", "qwen2.5-14b-instruct")), trace)
    assert main(["simulate", "--trace", str(trace), "-c", CONFIG]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no lengths for qwen2.5-7b-instruct" in err


def test_an_empty_trace_is_refused(tmp_path, capsys):
    trace = tmp_path / "empty.jsonl"
    trace.write_text("")
    assert main(["simulate", "--trace", str(trace), "-c", CONFIG]) == 2
    assert "holds no calls" in capsys.readouterr().err
