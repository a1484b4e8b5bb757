"""The per-seed tables docs/results.md quotes, from a results file alone."""

import json

import pytest

from hetflow.bench.headline import best_rival_per_seed
from hetflow.bench.seed_tables import common_load_table, main, ratio_table

LOAD = "80% of the best rival's capacity"


def run(policy: str, setting: str, seed: int, p95_s: float, load: str = LOAD, stable: bool = True) -> dict:
    return {"policy": policy, "setting": setting, "seed": seed, "load": load, "rate_per_s": 0.8,
            "task_score": 0.7, "expected_task_score": 0.71, "latency_s": {"p95": p95_s},
            "longest_decile_p95_s": 2 * p95_s, "queueing_share": 0.01, "prefix_hit_rate": 0.8,
            "within_slo_share": 0.99, "stability": {"stable": stable}}


def results() -> dict:
    return {"capacity": [{"policy": "hetflow", "capacity_per_s": [1.2, 1.0], "task_score_at_capacity": [0.7, 0.7],
                          "queueing_share_at_capacity": 0.04, "prefix_hit_rate_at_capacity": 0.8},
                         {"policy": "llm-d", "capacity_per_s": [1.0, 0.8], "task_score_at_capacity": [0.7, 0.7],
                          "queueing_share_at_capacity": 0.02, "prefix_hit_rate_at_capacity": 0.7}],
            "rivals": [{"rival": "llm-d", "winner": ["llm-d", "llm-d-precise"], "capacity_per_s": [1.0, 0.8],
                        "task_score_at_capacity": [0.69, 0.70]},
                       {"rival": "vllm-router", "winner": ["cache-aware", "cache-aware"], "capacity_per_s": [0.6, 1.25],
                        "task_score_at_capacity": [0.68, 0.71]}],
            "work_ceiling": {"1": {"ceiling_per_s": 1.25}, "2": {"ceiling_per_s": 1.3}},
            "runs": [run("hetflow", "hetflow", 2, 40.0), run("hetflow", "hetflow", 1, 50.0),
                     run("llm-d", "llm-d", 1, 60.0), run("llm-d", "llm-d-precise", 2, 70.0, stable=False),
                     run("hetflow", "hetflow", 1, 7.25, load="fixed")]}


def test_the_best_rival_of_each_seed_and_hetflow_over_it():
    assert best_rival_per_seed(results()["rivals"]) == [("llm-d", 1.0), ("vllm-router", 1.25)]
    table = ratio_table(results())
    assert "| hetflow | 1.200, 0.800 | 0.960, 0.769 | 1.200, 1.250 | 2.000, 0.800 |" in table


def test_a_rival_at_the_common_load_is_one_row_over_its_winners_seed_by_seed():
    table = common_load_table(results())
    assert table.startswith(f"At {LOAD}:")
    assert "| hetflow | 1, 2 | 0.80, 0.80 | 0.700, 0.700 | 0.710, 0.710 | 50.0, 40.0 | 100.0, 80.0 |" in table
    assert "| llm-d (llm-d, llm-d-precise) | 1, 2 |" in table and table.rstrip().endswith("| yn |")
    assert "7.2" not in table   # the run at another load is left out


def test_a_results_file_without_capacities_is_refused(tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"runs": [], "rivals": []}))
    with pytest.raises(SystemExit, match="no capacities with rivals"):
        main([str(path)])


def test_the_tables_are_printed_from_a_file(tmp_path, capsys):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results()))
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "| llm-d | 1.000, 0.800 | 0.700, 0.700 | 2.0%, 70.0% |" in out and "work ceilings per seed" in out
