"""Cascade serving on a live stack of sim engines (Cascadia 3.3): the client sends what it always sends."""

import pytest

from balancer_svc import judge_artifact
from hetflow.client import HetflowClient, build_request
from hetflow.core.cascade.learned_scorer import train
from hetflow.v1 import balancer_pb2
from hetflow.workloads.generate import generate
from tests.integration.harness import LARGE, SMALL, serving_gateway, stack_config, start_stack, wait_until_idle


async def test_an_llm_judge_that_gives_no_rating_sends_every_call_to_the_large_model_and_is_timed():
    # Sim engines answer with filler words, so the judge (the large model) never rates: every call is forwarded.
    raw = stack_config(cascade={"models": [SMALL, LARGE], "thresholds": [60],
                                "judge": {"kind": "llm", "model": LARGE, "max_tokens": 2}})
    stack = await start_stack(raw)
    try:
        async with HetflowClient(stack.address("balancer")) as client:
            result = await client.complete(build_request(prompt="Reverse a string.", max_tokens=24, program_id="p1",
                                                         want_receipt=True, request_id="r1"))
            workload = await client.stub.Workload(balancer_pb2.WorkloadRequest())
        [sampled] = workload.samples  # what the re-planner reads: no grade when the judge gave none
        assert sampled.prompt == "Reverse a string." and not sampled.HasField("first_grade")
        assert workload.rate_per_s > 0 and workload.window_s == 300
        assert result.model == LARGE and result.request_id == "r1" and result.text
        small, large = result.receipt.cascade
        assert (small.model, small.outcome, large.model, large.outcome) == (SMALL, "escalated", LARGE, "last-model")
        assert "no rating" in small.why and small.judge == f"llm:{LARGE}" and small.judge_ms > 0
        assert small.engine_id == "small-0" and small.output_tokens > 0 and small.request_id == "r1/c1"
        snap = await wait_until_idle(stack)  # both stages and the judge call were released
        assert all(e.in_flight_requests == 0 for e in snap.engines)
    finally:
        await stack.close()


@pytest.mark.slow
async def test_a_learned_judge_keeps_some_calls_on_the_small_model_and_a_pinned_call_skips_the_cascade(tmp_path):
    scorer, _ = train(generate("math", 80, 0, models=[SMALL, LARGE]), [SMALL, LARGE])
    judge_artifact.save(scorer, tmp_path / "judge", "sha", {})
    raw = stack_config(cascade={"models": [SMALL, LARGE], "thresholds": [0.0],
                                "judge": {"kind": "learned", "artifact": str(tmp_path / "judge")}})
    stack = await start_stack(raw)
    try:
        async with HetflowClient(stack.address("balancer")) as client:
            kept = await client.complete(build_request(prompt="What is 3 + 4?", max_tokens=16, want_receipt=True))
            workload = await client.stub.Workload(balancer_pb2.WorkloadRequest())
            pinned = await client.complete(build_request(prompt="What is 3 + 4?", max_tokens=16, model_pin=LARGE,
                                                         want_receipt=True))
        [stage] = kept.receipt.cascade  # h_1 = 0: any grade is accepted
        assert kept.model == SMALL and stage.outcome == "accepted" and stage.judge == "learned"
        assert 0 <= stage.score <= 100 and workload.samples[0].first_grade == stage.score
        assert pinned.model == LARGE and not pinned.receipt.cascade
    finally:
        await stack.close()


def test_a_learned_judge_for_other_models_is_refused_at_start(tmp_path):
    scorer, _ = train(generate("math", 20, 0, models=[LARGE]), [LARGE])
    judge_artifact.save(scorer, tmp_path / "judge", "sha", {})
    from balancer_svc import app
    from balancer_svc.config import from_stack

    raw = stack_config(cascade={"models": [SMALL, LARGE], "thresholds": [50],
                                "judge": {"kind": "learned", "artifact": str(tmp_path / "judge")}})
    with pytest.raises(ValueError, match=f"missing \\['{SMALL}'\\]"):
        app.build(from_stack(raw))


async def test_the_gateway_serves_a_cascade_unchanged_and_its_receipt_lists_the_stages():
    import openai

    from tests.factories import free_port

    raw = stack_config(cascade={"models": [SMALL, LARGE], "thresholds": [60],
                                "judge": {"kind": "llm", "model": LARGE, "max_tokens": 2}})
    raw["gateway"] = {"port": free_port()}
    stack = await start_stack(raw)
    try:
        async with serving_gateway(raw) as base_url, \
                openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
            reply = await client.chat.completions.create(
                model="hetflow", messages=[{"role": "user", "content": "Sort a list."}], max_tokens=8,
                extra_body={"hetflow": {"receipt": True}})
            stream = await client.chat.completions.create(
                model="hetflow", messages=[{"role": "user", "content": "Sort a list."}], max_tokens=8, stream=True)
            streamed = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        stages = reply.model_extra["hetflow"]["receipt"]["cascade"]
        assert [(s["model"], s["outcome"]) for s in stages] == [(SMALL, "escalated"), (LARGE, "last-model")]
        assert reply.model == LARGE and reply.choices[0].message.content and streamed
    finally:
        await stack.close()
