"""``hetflow replan --apply`` on a stack ``hetflow up`` runs (Cascadia 4.4): an engine added, the cascade
switched, an engine removed, one step at a time, while calls keep coming; none of them fails."""

import asyncio

import pytest
import yaml

from balancer_svc import judge_artifact
from hetflow import stackctl
from hetflow.client import HetflowClient, build_request
from hetflow.core.cascade.learned_scorer import train
from hetflow.planner.apply import apply, healthy_engines
from hetflow.planner.replan import ADD, REMOVE, SWITCH, Replica, Step
from hetflow.runtime.ports import free_port
from hetflow.workloads.generate import generate
from tests.integration.harness import LARGE, SMALL

pytestmark = pytest.mark.slow  # starts a stack of processes


def stack_file(tmp_path, judge):
    engine = {"backend": "sim", "sim_output_median_tokens": 8, "report_interval_s": 0.2, "metrics_port": 0}
    raw = {"stack": {"name": "replan-apply", "host": "127.0.0.1"},
           "monitor": {"port": free_port(), "metrics_port": 0, "engine_stale_after_s": 3.0},
           "router": {"port": free_port(), "metrics_port": 0, "models": {SMALL: 0.4, LARGE: 0.7}},
           "predictor": {"port": free_port(), "metrics_port": 0},
           "balancer": {"port": free_port(), "metrics_port": 0, "max_loop_lag_s": 0.0, "accept_wait_target_s": 0.0,
                        "cascade": {"models": [SMALL, LARGE], "thresholds": [100.0], "judge": judge}},
           "engines": [{"name": "small-0", "port": free_port(), "profile": f"{SMALL}@a6000", **engine},
                       {"name": "large-0", "port": free_port(), "profile": f"{LARGE}@a6000", **engine}]}
    path = tmp_path / "stack.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path, raw


async def keep_calling(address: str, stop: asyncio.Event, served: list[str], failed: list[str]) -> None:
    async with HetflowClient(address) as client:
        while not stop.is_set():
            try:
                result = await client.complete(build_request(prompt="What is 2 + 2?", max_tokens=8), timeout_s=20)
                served.append(result.model)
            except Exception as exc:  # noqa: BLE001 - every failure is the finding
                failed.append(repr(exc))
            await asyncio.sleep(0.05)


async def healthy_soon(raw, expected: set[str], timeout_s: float = 30.0) -> set[str]:
    """The engines the monitor counts healthy, read until they are ``expected`` or ``timeout_s`` has passed: a
    loaded host can hold an engine's report past the stale bound for a moment (a bound on waiting, not a timing)."""
    deadline_s = asyncio.get_running_loop().time() + timeout_s
    while (healthy := await healthy_engines(raw)) != expected and asyncio.get_running_loop().time() < deadline_s:
        await asyncio.sleep(0.2)
    return healthy


async def test_a_rollout_applied_while_serving_loses_no_call_and_switches_the_cascade(tmp_path):
    scorer, _ = train(generate("math", 60, 0, models=[SMALL, LARGE]), [SMALL, LARGE])
    judge_artifact.save(scorer, tmp_path / "judge", "sha", {})
    path, raw = stack_file(tmp_path, {"kind": "learned", "artifact": str(tmp_path / "judge")})
    new_stack = {"engines": [{"name": "x", "host": "engine-x", "port": 1, "model": SMALL, "backend": "sim",
                              "profile": f"{SMALL}@a6000", "sim_output_median_tokens": 8, "report_interval_s": 0.2}],
                 "balancer": {"cascade": {**raw["balancer"]["cascade"], "thresholds": [0.0]}}}
    steps = [Step(ADD, "small-new1", Replica(SMALL), "test"), Step(SWITCH, why="test"),
             Step(REMOVE, "small-0", Replica(SMALL), "test")]
    assert await asyncio.to_thread(stackctl.up, path, 120) == 0
    served_before: list[str] = []
    served: list[str] = []
    failed: list[str] = []
    try:
        address = f"127.0.0.1:{raw['balancer']['port']}"
        stop = asyncio.Event()
        warmup = asyncio.get_running_loop().create_task(keep_calling(address, stop, served_before, failed))
        await asyncio.sleep(1.0)
        stop.set()
        await warmup
        stop = asyncio.Event()
        load = asyncio.get_running_loop().create_task(keep_calling(address, stop, served, failed))
        await apply(path, new_stack, steps, progress=lambda _: None, step_timeout_s=60)
        await asyncio.sleep(1.0)
        stop.set()
        await load
        after = yaml.safe_load(path.read_text())
        assert await healthy_soon(after, {"small-new1", "large-0"}) == {"small-new1", "large-0"}
    finally:
        await asyncio.to_thread(stackctl.down, path)
    assert failed == []
    assert set(served_before) == {LARGE}  # h_1 = 100: every call forwarded to the large model
    assert served[-1] == SMALL  # h_1 = 0 after the switch: accepted on the small one
    assert (tmp_path / "stack.yaml.before-replan").exists()
