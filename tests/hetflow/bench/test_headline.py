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
                     {"load": "fixed", "policy": "hetflow", "task_score": 0.10}],
            "runs": [run("hetflow", 1, 50.0), run("hetflow", 2, 40.0), run("hetflow", 3, 60.0),
                     run("llm-d", 1, 75.0), run("llm-d", 3, 54.0), run("vllm-router", 2, 48.0),
                     run("semantic-router", 1, 5.0), {**run("hetflow", 1, 1.0), "load": "fixed"}]}


def run(policy: str, seed: int, p95_s: float) -> dict:
    return {"policy": policy, "seed": seed, "load": COMMON_LOAD, "latency_s": {"p95": p95_s}}


def test_each_seed_against_the_rival_best_on_it_and_the_score_of_the_rival_best_on_most():
    row = headline_row("agent", results(), "hetflow", "docs/results.md#agent")
    assert row.best_rival == ("llm-d", "vllm-router", "llm-d")
    assert row.ratios == pytest.approx((1.2, 1.0, 0.9))
    assert (row.default_task_score, row.best_rival_task_score) == (0.70, 0.68)  # llm-d's, not the slow rival's
    assert "[agent](docs/results.md#agent)" in table([row]) and "1.20x, 1.00x, 0.90x" in table([row])


def test_p95_per_seed_is_that_seeds_best_rival_over_the_default_at_the_common_load():
    row = headline_row("agent", results(), "hetflow", "docs/results.md#agent")
    assert row.p95_ratios == pytest.approx((1.5, 1.2, 0.9))   # llm-d, the router, llm-d; never the fixed load
    assert "1.50x, 1.20x, 0.90x" in table([row])


def test_a_seed_without_its_best_rival_at_the_common_load_is_left_out_of_p95():
    data = results()
    data["runs"] = [r for r in data["runs"] if (r["policy"], r["seed"]) != ("vllm-router", 2)]
    assert headline_row("agent", data, "hetflow", "s").p95_ratios == pytest.approx((1.5, 0.9))


def test_a_default_missing_from_the_results_is_named():
    with pytest.raises(ValueError, match="no policy 'hetflow-x'"):
        headline_row("agent", results(), "hetflow-x", "s")


def test_the_shipped_headline_reads_its_results_files():
    rows = load_rows(Path("bench/headline.yaml"))
    assert rows and all(len(r.ratios) == 3 and r.section.startswith("docs/results.md#") for r in rows)
