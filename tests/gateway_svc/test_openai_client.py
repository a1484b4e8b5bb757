"""The gateway driven by the official ``openai`` client against a sim stack: sync, async, streaming,
receipts, cancellation mid-stream, and OpenAI-shaped errors with nothing left in flight."""

import asyncio

import httpx
import openai
import pytest

from tests.integration.harness import LARGE, SMALL, stack_config, wait_until_idle, with_gateway

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
async def stack():
    async with with_gateway(stack_config(), max_body_bytes=4096) as s:
        yield s


def _sync_chat(base_url: str) -> openai.types.chat.ChatCompletion:
    with openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0) as c:
        return c.chat.completions.create(model=SMALL, messages=[{"role": "user", "content": "hi"}], max_tokens=6,
                                         extra_body={"ignore_eos": True})


async def test_the_sync_client_gets_a_chat_completion_on_the_pinned_model(stack):
    reply = await asyncio.to_thread(_sync_chat, stack.base_url)
    assert reply.model == SMALL and reply.choices[0].message.content
    assert reply.usage.completion_tokens == 6 and reply.usage.prompt_tokens > 0
    assert reply.choices[0].finish_reason == "length"


async def test_models_lists_the_router_name_and_each_served_model(client):
    names = [m.id async for m in client.models.list()]
    assert names == ["hetflow", SMALL, LARGE]


async def test_workflow_metadata_from_extra_body_reaches_the_receipt(stack, client):
    for stage, agent in enumerate(("planner", "coder"), start=1):
        raw = await client.chat.completions.with_raw_response.create(
            model="hetflow", messages=[{"role": "user", "content": f"{agent} step"}], max_tokens=4,
            extra_body={"hetflow": {"program_id": "gw-prog", "agent": agent, "stage_index": stage, "stage_count": 2,
                                    "receipt": True}})
        body = raw.parse().model_extra["hetflow"]
        assert body["receipt"]["program_id"] == "gw-prog" and body["engine_id"]
        assert raw.headers["x-hetflow-engine-id"] == body["receipt"]["engine_id"]
    assert body["receipt"]["stages"][0]["rule"] == "program-affinity"  # the second call keeps the program's model
    await wait_until_idle(stack)


async def test_a_framework_session_header_makes_its_calls_one_program_and_the_receipt_says_so(stack, client):
    """No hetflow metadata: Claude Code's session headers name the program and its agents, and the monitor
    places each call in the run."""
    receipts = []
    for agent in ("lead", "explorer"):
        raw = await client.chat.completions.with_raw_response.create(
            model="hetflow", messages=[{"role": "user", "content": f"{agent} step"}], max_tokens=4,
            extra_headers={"x-claude-code-session-id": "cc-session", "x-claude-code-agent-id": agent,
                           "x-hetflow-receipt": "1"})
        receipts.append(raw.parse().model_extra["hetflow"]["receipt"])
    workflows = [r["workflow"] for r in receipts]
    assert {r["program_id"] for r in receipts} == {"cc-session"}
    assert [(w["agent"], w.get("upstream_agent", ""), w["identity_source"]) for w in workflows] == [
        ("lead", "", "claude-code"), ("explorer", "", "claude-code")]
    assert receipts[1]["stages"][0]["rule"] == "program-affinity"
    assert [r["inferred_stages"]["stage_index"] for r in receipts] == [1, 2]   # Kairos 4.2: one after the other
    assert [w["stage_index"] for w in workflows] == [1, 2]
    await wait_until_idle(stack)


async def test_streamed_chat_counts_usage_and_carries_the_receipt_when_the_header_asks(client):
    stream = await client.chat.completions.create(
        model="hetflow", messages=[{"role": "user", "content": "count"}], max_tokens=8, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
        extra_headers={"x-hetflow-receipt": "1"})
    chunks = [c async for c in stream]
    assert chunks[0].model_extra["hetflow"]["receipt"]["stages"]
    assert chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 8
    assert "".join(c.choices[0].delta.content or "" for c in chunks[:-1])


async def test_streamed_completion_for_the_prompt_api(client):
    stream = await client.completions.create(model="hetflow", prompt="once upon a time", max_tokens=5, stream=True,
                                             extra_body={"ignore_eos": True})
    texts = [c.choices[0].text async for c in stream]
    assert len(texts) == 5 and all(texts)


async def test_closing_the_stream_mid_way_aborts_the_engine_request(stack, client):
    stream = await client.chat.completions.create(
        model="hetflow", messages=[{"role": "user", "content": "go on forever"}], max_tokens=5000, stream=True,
        extra_body={"ignore_eos": True})
    request_id = None
    async for chunk in stream:
        request_id = chunk.id
        if chunk.choices and chunk.choices[0].delta.content and request_id:
            break
    await stream.close()
    snap = await wait_until_idle(stack)
    assert all(request_id not in e.status.active_request_ids for e in snap.engines)
    assert all(e.in_flight_requests == 0 for e in snap.engines)


async def test_unknown_model_is_openais_404(client):
    with pytest.raises(openai.NotFoundError) as caught:
        await client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    assert caught.value.body["code"] == "model_not_found" and caught.value.body["param"] == "model"


async def test_a_bad_deadline_header_is_a_400_naming_it(client):
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(model="hetflow", messages=[{"role": "user", "content": "x"}],
                                             extra_headers={"x-hetflow-deadline-unix-s": "soon"})
    assert caught.value.body["param"] == "deadline_unix_s"


async def test_a_past_deadline_is_the_balancers_deadline_exceeded_as_504(client):
    with pytest.raises(openai.APIStatusError) as caught:
        await client.chat.completions.create(model="hetflow", messages=[{"role": "user", "content": "x"}],
                                             extra_body={"hetflow": {"program_id": "late", "deadline_unix_s": 1.0}})
    assert caught.value.status_code == 504 and caught.value.body["code"] == "deadline_exceeded"


async def test_malformed_json_and_oversized_bodies_are_4xx_and_leave_nothing_in_flight(stack):
    async with httpx.AsyncClient(base_url=stack.base_url) as http:
        bad = await http.post("/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
        big = await http.post("/chat/completions", json={"model": "hetflow", "messages": [
            {"role": "user", "content": "x" * 5000}]})
        missing = await http.post("/completions", json={"model": "hetflow", "max_tokens": 3})
    assert bad.status_code == 400 and "not valid JSON" in bad.json()["error"]["message"]
    assert big.status_code == 413 and big.json()["error"]["code"] == "request_too_large"
    assert missing.status_code == 400 and missing.json()["error"]["param"] == "prompt"
    snap = await wait_until_idle(stack)
    assert all(e.in_flight_requests == 0 for e in snap.engines)


async def test_metrics_use_vllms_names(stack, client):
    await client.completions.create(model="hetflow", prompt="hello", max_tokens=3, extra_body={"ignore_eos": True})
    async with httpx.AsyncClient() as http:
        text = (await http.get(stack.base_url.removesuffix("/v1") + "/metrics")).text
        health = await http.get(stack.base_url.removesuffix("/v1") + "/health")
    for name in ("vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket",
                 "vllm:e2e_request_latency_seconds_count", "vllm:generation_tokens_total",
                 "vllm:request_success_total", "hetflow_gateway_overhead_seconds_count"):
        assert name in text, name
    assert health.status_code == 200
