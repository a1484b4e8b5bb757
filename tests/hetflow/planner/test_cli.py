"""`hetflow plan`: a plan from a config file, and bad configs answered with the constraint they break."""

import json

import pytest
import yaml

from hetflow.cli import main

SMALL = {
    "cascade": ["qwen2.5-1.5b-instruct", "qwen2.5-7b-instruct"],
    "gpus": {"h100-80g": 2},
    "workload": {"family": "code", "programs": 40, "seed": 1, "sample": 30, "rate_per_s": 3},
    "requirement": {"q_min": 60, "stable_iterations": 2, "max_iterations": 6},
    "simulation": {"requests": 30},
}


def write(tmp_path, cfg):
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_a_plan_keeps_to_the_budget_and_writes_its_json(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert main(["plan", "-c", str(write(tmp_path, SMALL)), "-o", str(out)]) == 0
    plan = json.loads(out.read_text())
    assert sum(a["gpus"] for a in plan["allocations"]) <= 2
    assert plan["processed_share"][0] == 1.0 and len(plan["thresholds"]) == 1
    assert "qwen2.5-1.5b-instruct: 100% of requests" in capsys.readouterr().out


@pytest.mark.parametrize("change, message", [
    ({"gpus": {}}, "gpus: give the budget"),
    ({"workload": {**SMALL["workload"], "rate_per_s": 0}}, "arrival rate must be positive"),
    ({"requirement": {"q_min": 101}}, "above the utopia point"),
    ({"cascade": ["qwen2.5-1.5b-instruct", "gpt-9"]}, "unknown architecture 'gpt-9'"),
    ({"budget": 3}, "unknown setting"),
])
def test_bad_plans_name_what_is_wrong(tmp_path, capsys, change, message):
    assert main(["plan", "-c", str(write(tmp_path, {**SMALL, **change}))]) == 2
    assert message in capsys.readouterr().err
