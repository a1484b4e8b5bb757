"""``hetflow replan`` against a live cascade (Cascadia 4.4): the live window differs from the plan's
workload, the sampled prompts are profiled on every model and graded, and the rollout to the new plan
keeps an engine of every served model at every step."""

import pytest

from balancer_svc import judge_artifact
from hetflow.client import HetflowClient, build_request
from hetflow.core.cascade.learned_scorer import train
from hetflow.planner.cli import PlanConfig, SimulationConfig, WorkloadConfig
from hetflow.planner.live import replan
from hetflow.planner.replan import ADD, REMOVE, SWITCH
from hetflow.planner.stack import StackSettings
from hetflow.workloads.generate import generate
from tests.integration.harness import LARGE, SMALL, stack_config, start_stack

pytestmark = pytest.mark.slow  # trains a judge, serves calls and plans


async def test_a_shifted_workload_is_profiled_replanned_and_rolled_out_one_engine_at_a_time(tmp_path):
    records = generate("math", 80, 0, models=[SMALL, LARGE])
    scorer, _ = train(records, [SMALL, LARGE])
    judge_artifact.save(scorer, tmp_path / "judge", "sha", {})
    judge = {"kind": "learned", "artifact": str(tmp_path / "judge")}
    engines = [{"name": "small-0", "profile": f"{SMALL}@a6000", "sim_output_median_tokens": 16},
               {"name": "large-0", "profile": f"{LARGE}@a6000", "sim_output_median_tokens": 16}]
    raw = stack_config(engines, cascade={"models": [SMALL, LARGE], "thresholds": [50.0], "judge": judge})
    cfg = PlanConfig(cascade=[SMALL, LARGE], gpus={"a6000": 2},
                     workload=WorkloadConfig(family="math", programs=40, sample=30, rate_per_s=50.0),
                     requirement={"q_min": 50, "stable_iterations": 2, "max_iterations": 4},
                     simulation=SimulationConfig(requests=30), judge=judge, stack=StackSettings(backend="sim"))
    stack = await start_stack(raw)
    try:
        async with HetflowClient(stack.address("balancer")) as client:
            for record in [r for r in records if r.stage_index == 1][:24]:
                await client.complete(build_request(prompt=record.user_prompt, max_tokens=32))
        report, _ = await replan(cfg, raw, stack.address("balancer"), scorer)
    finally:
        await stack.close()
    assert any(reason.startswith("arrival rate 50 ->") for reason in report["shift"])  # 24 calls, not 50/s
    assert report["live"]["samples"] == 24 and report["profiled"] == 24  # the profiling calls were not sampled
    assert {e["model"] for e in report["stack"]["engines"]} <= {SMALL, LARGE}
    served, engines_now = {SMALL, LARGE}, {"small-0": SMALL, "large-0": LARGE}
    for step in report["rollout"]:
        if step["action"] == SWITCH:
            served = set(report["stack"]["balancer"].get("cascade", {}).get("models") or
                         {e["model"] for e in report["stack"]["engines"]})
        elif step["action"] == ADD:
            engines_now[step["engine"]] = step["replica"]["model"]
        elif step["action"] == REMOVE:
            del engines_now[step["engine"]]
        assert served <= set(engines_now.values())
