"""The front page's headline from the sweeps' results files."""

from pathlib import Path

import pytest

from hetflow.bench.headline import COMMON_LOAD, headline_row, load_rows, table


def results() -> dict:
    return {"capacity": [{"policy": "hetflow", "capacity_per_s": [1.2, 1.0, 0.9]}],
            "rivals": [{"rival": "llm-d", "capacity_per_s": [1.0, 0.9, 1.0]},
                       {"rival": "vllm-router", "capacity_per_s": [0.8, 1.0, 0.6]},
                       {"rival": "semantic-router", "capacity_per_s": [0.1, 0.1, 0.1]}],
            "rows": [{"load": COMMON_LOAD, "policy": "hetflow", "task_score": 0.70},
                     {"load": COMMON_LOAD, "policy": "llm-d", "task_score": 0.68},
                     {"load": COMMON_LOAD, "policy": "vllm-router", "task_score": 0.69},
                     {"load": COMMON_LOAD, "policy": "semantic-router", "task_score": 0.90},
                     {"load": "fixed", "policy": "hetflow", "task_score": 0.10}]}


def test_each_seed_against_the_rival_best_on_it_and_the_score_of_the_rival_best_on_most():
    row = headline_row("agent", results(), "hetflow", "docs/results.md#agent")
    assert row.best_rival == ("llm-d", "vllm-router", "llm-d")
    assert row.ratios == pytest.approx((1.2, 1.0, 0.9))
    assert (row.default_task_score, row.best_rival_task_score) == (0.70, 0.68)  # llm-d's, not the slow rival's
    assert "[agent](docs/results.md#agent)" in table([row]) and "1.20x, 1.00x, 0.90x" in table([row])


def test_a_default_missing_from_the_results_is_named():
    with pytest.raises(ValueError, match="no policy 'hetflow-x'"):
        headline_row("agent", results(), "hetflow-x", "s")


def test_the_shipped_headline_reads_its_results_files():
    rows = load_rows(Path("bench/headline.yaml"))
    assert rows and all(len(r.ratios) == 3 and r.section.startswith("docs/results.md#") for r in rows)
