"""The RL router served by the balancer (issue 16): ``hetflow train rl`` writes a policy for a stack's
engines; the stack's balancer loads it, its receipts name every action's Q-value, and with an engine gone
the decision falls back to the default engine choice and the receipt says so."""

import asyncio

import pytest
import yaml

from hetflow.cli import main
from hetflow.client import HetflowClient, build_request
from hetflow.core.rl_router.policy_file import load
from tests.integration.harness import SMALL, stack_config, start_stack

ENGINES = [{"name": "small-0", "profile": f"{SMALL}@a6000"}, {"name": "small-1", "profile": f"{SMALL}@a6000"}]


async def until_one_engine_is_healthy(stack, timeout_s=10.0):
    for _ in range(int(timeout_s / 0.05)):
        if sum(e.healthy for e in (await stack.snapshot()).engines) == 1:
            return
        await asyncio.sleep(0.05)
    raise TimeoutError("the monitor still sees both engines healthy")


@pytest.fixture(scope="module")
def policy_file(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rl")
    (tmp / "stack.yaml").write_text(yaml.safe_dump(stack_config(ENGINES)))
    assert main(["train", "rl", "-c", str(tmp / "stack.yaml"), "--families", "math", "--requests", "20",
                 "--rate", "10", "--episodes", "2", "--explore-episodes", "1", "--batch-size", "32",
                 "-o", str(tmp / "rl.pt")]) == 0
    return tmp / "rl.pt"


def test_the_trained_policy_names_the_stacks_engines(policy_file):
    policy = load(policy_file)
    assert policy.engine_ids == ("small-0", "small-1") and policy.model == SMALL
    assert policy.trained_on["episodes"] == 2 and policy.step_s > 0


async def test_the_balancer_serves_the_policy_and_falls_back_when_an_engine_is_gone(policy_file):
    raw = stack_config(ENGINES, policy={"model": "least-load", "engine": "rl-router",
                                        "engine_params": {"policy": str(policy_file), "max_hold_s": 0.2}})
    stack = await start_stack(raw)
    try:
        async with HetflowClient(stack.address("balancer")) as client:
            reply = await client.complete(build_request(prompt="add 2 and 3", max_tokens=4, program_id="rl-1",
                                                        want_receipt=True))
            engine = next(s for s in reply.receipt.stages if s.stage == "engine")
            assert engine.plugin == "rl-router" and engine.rule.startswith("rl-router:q-max")
            assert set(engine.scores) == {"small-0", "small-1", "no-action"}
            assert engine.chosen == reply.receipt.engine_id
            await stack.stop("small-1")
            await until_one_engine_is_healthy(stack)
            reply = await client.complete(build_request(prompt="add 4 and 5", max_tokens=4, program_id="rl-2",
                                                        want_receipt=True))
            engine = next(s for s in reply.receipt.stages if s.stage == "engine")
            assert engine.rule.startswith("rl-router:fallback (engines now ['small-0']") and engine.chosen == "small-0"
    finally:
        await stack.close()
