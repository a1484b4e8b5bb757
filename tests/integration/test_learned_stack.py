"""The stack with the learned router (ONNX int8) and the QRF predictor in place of the baselines."""

from typing import Any, Callable

import pytest

from hetflow.client import HetflowClient, build_request
from router_svc import app as router_app
from router_svc.artifact import ArtifactError
from router_svc.config import RouterConfig
from tests.integration.harness import LARGE, SMALL, stack_config, start_stack, wait_until_idle

MODELS = [SMALL, LARGE]


@pytest.fixture(scope="module")
def artifacts(trained_router, trained_predictor) -> dict[str, str]:
    return {"router": str(trained_router[0]), "predictor": str(trained_predictor)}


@pytest.fixture(scope="module")
async def stack(artifacts):
    raw = stack_config()
    raw["router"].update(kind="minilm-onnx", artifact=artifacts["router"], models=MODELS)
    raw["predictor"].update(kind="qrf", artifact=artifacts["predictor"], models=MODELS)
    s = await start_stack(raw)
    yield s
    await s.close()


async def read_the_router(stack, client: HetflowClient, request: Callable[[str], Any]) -> Any:
    """The result of a call whose model stage read the router. The balancer asks it only where its
    confidences can change the model (two models within the slack, as when both are idle), so a call decided
    while an earlier call's load was still in the balancer's view is sent again, as a new program."""
    for attempt in range(5):
        await wait_until_idle(stack)
        result = await client.complete(request(f"attempt-{attempt}"))
        if result.receipt.stages[0].scores:
            return result
    raise AssertionError("no call's model stage read the router in five tries on an idle stack")


async def test_balancer_decides_with_learned_scores_and_predictions(stack):
    async with HetflowClient(stack.address("balancer")) as client:
        a = await read_the_router(stack, client, lambda tag: build_request(
            prompt="What is 3 + 4?", max_tokens=4, program_id=f"q1-{tag}", workflow="math", agent="solver",
            stage_index=1, stage_count=1, want_receipt=True))
        b = await read_the_router(stack, client, lambda tag: build_request(
            prompt="Factor x**3 - 2*x**2 + x over the rationals and explain.", max_tokens=4, program_id=f"q2-{tag}",
            workflow="math", agent="planner", stage_index=1, stage_count=4, want_receipt=True))
    for result in (a, b):
        model_stage, priority_stage = result.receipt.stages[0], result.receipt.stages[2]
        assert set(model_stage.scores) == set(MODELS) and all(0 < v < 1 for v in model_stage.scores.values())
        assert "predictor-unavailable" not in priority_stage.rule and result.receipt.predicted_tokens > 0
    assert dict(a.receipt.stages[0].scores) != dict(b.receipt.stages[0].scores)   # per-prompt, not a prior


async def test_receipt_says_when_the_router_cut_the_prompt(stack):
    async with HetflowClient(stack.address("balancer")) as client:
        result = await read_the_router(stack, client, lambda tag: build_request(
            prompt="integrate " * 300, max_tokens=4, program_id=f"long-{tag}", want_receipt=True))
    assert result.receipt.stages[0].rule.startswith("router-prompt-truncated;")


def test_router_service_refuses_an_artifact_for_other_models(artifacts):
    with pytest.raises(ArtifactError, match="router.models"):
        router_app.build(RouterConfig(kind="minilm-onnx", artifact=artifacts["router"],
                                      models={"qwen2.5-14b-instruct": 0.5}))
