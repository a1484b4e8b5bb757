"""The capacity tables against the best rival: ratios per seed and the trades written as such."""

from hetflow.bench.sweep_cli import TRADE_CAPACITY, TRADE_SCORE, against_best_rival, against_best_rival_table

RIVALS = [{"rival": "a", "capacity_per_s": [10.0, 20.0], "task_score_at_capacity": [0.60, 0.60]},
          {"rival": "b", "capacity_per_s": [12.0, 15.0], "task_score_at_capacity": [0.70, 0.50]}]


def row(policy, capacities, scores):
    return {"policy": policy, "capacity_per_s": capacities, "task_score_at_capacity": scores}


def test_each_seed_is_set_against_its_own_best_rival_and_a_gain_bought_with_score_is_a_trade():
    seeds = against_best_rival(row("p", [13.2, 21.0], [0.69, 0.61]), RIVALS)
    assert [(s["best_rival"], round(s["ratio"], 2)) for s in seeds] == [("b", 1.1), ("a", 1.05)]
    assert [s["trade"] for s in seeds] == [TRADE_CAPACITY, None]   # 0.69 < 0.70 - 0.005; seed 2 leads on both


def test_a_higher_score_at_less_capacity_is_the_other_trade_and_within_tolerance_is_none():
    seeds = against_best_rival(row("p", [9.0, 22.0], [0.75, 0.603]), RIVALS)
    assert [s["trade"] for s in seeds] == [TRADE_SCORE, None]
    table = against_best_rival_table([row("p", [9.0, 22.0], [0.75, 0.603]), row("q", [12.0, 20.0], [0.7, 0.6])],
                                      RIVALS, ["p", "q"])
    assert f"| {TRADE_SCORE} |" in table.splitlines()[-2] and table.splitlines()[-1].endswith("| no |")
