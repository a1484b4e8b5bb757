"""The simulated server as a vLLM client sees it: vLLM 0.32's routes, bodies, SSE chunks, errors and
metric names, over the engine model on a clock the test moves (no wall-clock waits)."""

from __future__ import annotations

import json

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine_svc.backends import vllm_metrics
from engine_svc.vllm_sim.app import build
from engine_svc.vllm_sim.config import VllmSimConfig
from engine_svc.vllm_sim.tokenizer import PromptTokenizer
from tests.factories import MovedClock

MODEL = "qwen2.5-1.5b-instruct"
PROFILE = f"{MODEL}@a6000"


@pytest.fixture(scope="module")
def tokenizer() -> PromptTokenizer:
    return PromptTokenizer()


@pytest.fixture
async def served(tokenizer):
    server, app = build(VllmSimConfig("sim-0", profile=PROFILE), tokenizer, MovedClock())
    await server.backend.start()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as client:
        yield server, client
    await server.backend.close()


def events(body: str) -> list[dict | str]:
    out: list[dict | str] = []
    for block in body.split("\n\n"):
        if block.startswith("data: "):
            data = block[len("data: "):]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


async def test_a_whole_completion_counts_with_the_named_tokenizer(served, tokenizer):
    server, client = served
    reply = await client.post("/v1/completions", json={"model": MODEL, "prompt": "def add(a, b):", "max_tokens": 5,
                                                       "ignore_eos": True})
    assert reply.status_code == 200
    body = reply.json()
    assert body["id"].startswith("cmpl-") and body["object"] == "text_completion" and body["model"] == MODEL
    assert body["choices"][0]["finish_reason"] == "length" and body["choices"][0]["text"]
    assert body["usage"] == {"prompt_tokens": len(tokenizer.encode("def add(a, b):")), "completion_tokens": 5,
                             "total_tokens": len(tokenizer.encode("def add(a, b):")) + 5,
                             "prompt_tokens_details": None, "completion_tokens_details": None}
    assert not server.backend.scheduler.requests  # nothing left in the engine


async def test_a_streamed_completion_ends_with_usage_then_done(served):
    _, client = served
    reply = await client.post("/v1/completions", json={"prompt": [5, 6, 7, 8], "max_tokens": 4, "ignore_eos": True,
                                                       "stream": True, "stream_options": {"include_usage": True}})
    chunks = events(reply.text)
    assert reply.headers["content-type"].startswith("text/event-stream")
    assert chunks[-1] == "[DONE]"
    assert chunks[-2]["choices"] == [] and chunks[-2]["usage"] == {"prompt_tokens": 4, "completion_tokens": 4,
                                                                    "total_tokens": 8}
    tokens = chunks[:-2]
    assert [c["choices"][0]["finish_reason"] for c in tokens][-1] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in tokens[:-1])
    assert all("system_fingerprint" not in c for c in tokens)  # with include_usage it rides on the usage chunk


async def test_a_streamed_chat_opens_with_the_role_and_counts_usage_on_every_chunk(served):
    _, client = served
    reply = await client.post("/v1/chat/completions", json={
        "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 3, "ignore_eos": True,
        "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    chunks = events(reply.text)
    first = chunks[0]
    assert first["object"] == "chat.completion.chunk" and first["choices"][0]["delta"] == {"role": "assistant",
                                                                                           "content": ""}
    assert first["usage"]["completion_tokens"] == 0
    tokens = chunks[1:-2]
    assert [c["usage"]["completion_tokens"] for c in tokens][-1] == 3
    assert tokens[-1]["choices"][0]["finish_reason"] == "length"
    assert chunks[-2]["usage"]["completion_tokens"] == 3


async def test_a_streamed_chat_whose_engine_fails_before_its_first_output_gets_the_error_first(served, monkeypatch):
    """vLLM streams a chat's role with the engine's first output, so an engine that fails before one sends the
    error as the first chunk (vLLM 0.32 ``chat_completion_stream_generator``); the router times a call's
    decode from its first chunk."""
    server, client = served

    async def fails(req, call):
        raise RuntimeError("engine died")
        yield  # an async generator, as the engine's

    monkeypatch.setattr(server, "run", fails)
    reply = await client.post("/v1/chat/completions", json={
        "messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 3, "stream": True})
    chunks = events(reply.text)
    assert chunks[0]["error"]["type"] == "InternalServerError" and chunks[1:] == ["[DONE]"]


async def test_an_answer_sent_back_in_the_next_call_is_found_in_the_prefix_cache(served, tokenizer):
    server, client = served
    messages = [{"role": "system", "content": "You are a coding agent. " * 8}, {"role": "user", "content": "plan"}]
    first = await client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 64, "ignore_eos": True})
    answer = first.json()["choices"][0]["message"]["content"]
    assert len(tokenizer.encode(answer, add_special_tokens=False)) == 64  # the text is the tokens it counted
    first_prompt = len(tokenizer.chat(messages))
    hits_before = server.backend.scheduler.prefix_hit_tokens
    messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": "now code it"}]
    await client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 4, "ignore_eos": True})
    reused = server.backend.scheduler.prefix_hit_tokens - hits_before
    assert reused > first_prompt  # the first prompt's blocks and the answer's full blocks


async def test_unknown_fields_and_vllm_xargs_are_accepted(served):
    _, client = served
    reply = await client.post("/v1/completions", json={
        "prompt": "x", "max_tokens": 2, "ignore_eos": True, "some_future_field": {"a": 1},
        "vllm_xargs": {"agentic_context": "{\"program_id\": \"p\"}", "step": 2, "tags": ["a", 1]}})
    assert reply.status_code == 200 and reply.json()["usage"]["completion_tokens"] == 2


@pytest.mark.parametrize(("path", "body", "status", "error_type", "param", "says"), [
    ("/v1/completions", {"model": "nope", "prompt": "x"}, 404, "NotFoundError", "model",
     f"The model `nope` does not exist. Valid aliases: {MODEL}."),
    ("/v1/completions", {"max_tokens": 3}, 400, "BadRequestError", "prompt",
     "Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)"),
    ("/v1/completions", {"prompt": "x", "max_tokens": 10**6}, 400, "BadRequestError", "max_tokens",
     "max_tokens=1000000 cannot be greater than max_model_len"),
    ("/v1/completions", {"prompt": [1] * 40000}, 400, "BadRequestError", "input_tokens",
     "This model's maximum context length is"),
    ("/v1/completions", {"prompt": "x", "max_tokens": "many"}, 400, "Bad Request", "body.max_tokens",
     "1 validation error"),
    ("/v1/completions", {"prompt": "x", "stream_options": {"include_usage": True}}, 400, "BadRequestError",
     "stream_options", "Stream options can only be defined when `stream=True`."),
    ("/v1/completions", {"prompt": [10**7]}, 400, "BadRequestError", None, "Token id 10000000 is out of vocabulary"),
    ("/v1/completions", {"prompt": ["a", "b"]}, 400, "BadRequestError", "prompt", "one prompt per request"),
    ("/v1/chat/completions", {"model": MODEL}, 400, "Bad Request", "body.messages", "'msg': 'Field required'"),
    ("/v1/completions", {"prompt": "x", "vllm_xargs": {"agentic_context": {"program_id": "p"}}}, 400, "Bad Request",
     "body.vllm_xargs.agentic_context", "a string, an integer, a number or a list"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"text": 5}]}]}, 400, "BadRequestError",
     None, ""),
    ("/v1/completions", {"prompt": "x", "max_tokens": 2, "min_tokens": 5}, 400, "BadRequestError", "min_tokens",
     "min_tokens must be less than or equal to max_tokens=2, got 5."),
])
async def test_bad_requests_get_vllms_status_and_nested_error(served, path, body, status, error_type, param, says):
    server, client = served
    reply = await client.post(path, json=body)
    assert reply.status_code == status
    error = reply.json()["error"]
    assert error["type"] == error_type and error["param"] == param and error["code"] == status
    assert says in error["message"]
    assert not server.backend.scheduler.requests


async def test_a_body_that_is_not_json_is_refused_as_vllm_refuses_it(served):
    _, client = served
    not_json = await client.post("/v1/completions", content=b"{nope", headers={"content-type": "application/json"})
    wrong_type = await client.post("/v1/completions", content=b"prompt=x", headers={"content-type": "text/plain"})
    assert not_json.status_code == wrong_type.status_code == 400
    assert "json_invalid" in not_json.json()["error"]["message"]
    assert "Only 'application/json' is allowed" in wrong_type.json()["error"]["message"]


async def test_the_small_routes_answer_as_vllm_does(served, tokenizer):
    _, client = served
    health, version = await client.get("/health"), await client.get("/version")
    models = await client.get("/v1/models")
    assert health.status_code == 200 and health.content == b""
    assert version.json() == {"version": "0.32.0"}
    card = models.json()["data"][0]
    assert card["id"] == MODEL and card["owned_by"] == "vllm" and card["max_model_len"] > 0
    tokens = (await client.post("/tokenize", json={"prompt": "hello world"})).json()
    assert tokens["tokens"] == list(tokenizer.encode("hello world")) and tokens["count"] == len(tokens["tokens"])
    chat = (await client.post("/tokenize", json={"messages": [{"role": "user", "content": "hi"}]})).json()
    assert chat["tokens"] == list(tokenizer.chat([{"role": "user", "content": "hi"}]))
    assert (await client.post("/v1/completions/render", json={})).status_code == 403  # vLLM without scale-out
    missing = await client.get("/get_load")  # not a vLLM 0.32 route
    assert missing.status_code == 404 and missing.json() == {"detail": "Not Found"}


async def test_metrics_carry_vllms_names_and_what_hetflows_vllm_server_backend_reads(served):
    _, client = served
    await client.post("/v1/completions", json={"prompt": list(range(3, 100)), "max_tokens": 6, "ignore_eos": True})
    await client.post("/v1/completions", json={"prompt": list(range(3, 100)), "max_tokens": 6, "ignore_eos": True})
    text = (await client.get("/metrics")).text
    samples = {s.name: s for family in text_string_to_metric_families(text) for s in family.samples}
    labels = samples["vllm:num_requests_running"].labels
    assert labels == {"model_name": MODEL, "engine": "0"}
    assert samples["vllm:generation_tokens_total"].value == 12
    assert samples["vllm:prompt_tokens_total"].value == 2 * 97
    assert samples["vllm:prefix_cache_hits_total"].value > 0  # the second prompt found the first's blocks
    assert samples["vllm:prompt_tokens_cached_total"].value == samples["vllm:prefix_cache_hits_total"].value
    assert samples["vllm:time_to_first_token_seconds_count"].value == 2
    assert samples["vllm:e2e_request_latency_seconds_count"].value == 2
    assert samples["hetflow_sim:step_late_share_count"].value > 0
    load = vllm_metrics.parse(text)  # what engine_svc's vllm-server backend reads from a vLLM server
    assert load.num_gpu_blocks > 0 and load.block_size == 16 and load.engine_steps > 0
    assert load.running == load.waiting == 0


@pytest.mark.parametrize(("policy", "engine_priority"), [("fcfs", 0.0), ("priority", 3.0)])
def test_a_requests_priority_reaches_the_engine_queue_only_under_priority_scheduling(tokenizer, policy,
                                                                                     engine_priority):
    server, _ = build(VllmSimConfig("sim-0", profile=PROFILE, scheduling_policy=policy), tokenizer, MovedClock())
    headers = httpx.Headers({"x-vllm-priority": "3"})  # the header overrides the body, as in vLLM
    req, output_tokens = server.check({"prompt": "x", "max_tokens": 4, "priority": 7}, headers, chat=False)
    assert req.priority == 3 and output_tokens <= 4
    assert server.engine_call(req, output_tokens).priority == engine_priority


def test_a_profile_whose_kv_cannot_hold_its_context_is_refused_as_vllm_refuses_to_start(tokenizer):
    with pytest.raises(ValueError, match="more than its KV cache holds"):
        build(VllmSimConfig("sim-0", profile="llama-3.1-8b-instruct@l4"), tokenizer, MovedClock())


async def test_health_fails_once_the_engine_loop_has_died(served):
    server, client = served
    assert (await client.get("/health")).status_code == 200
    await server.backend.close()  # the loop gone, as after an engine crash
    assert (await client.get("/health")).status_code == 503 and (await client.get("/ping")).status_code == 503


async def test_with_scale_out_the_render_routes_answer_with_the_token_ids_the_request_would_run(tokenizer):
    server, app = build(VllmSimConfig("sim-0", profile=PROFILE, enable_scale_out=True), tokenizer, MovedClock())
    await server.backend.start()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://sim") as client:
            messages = [{"role": "user", "content": "hi"}]
            chat = await client.post("/v1/chat/completions/render",
                                     json={"model": MODEL, "messages": messages, "max_tokens": 7})
            text = await client.post("/v1/completions/render", json={"prompt": "hello world", "stream": True})
            unknown_model = await client.post("/v1/completions/render", json={"model": "gpt-9", "prompt": "x"})
            derender = await client.post("/v1/completions/derender", json={})
    finally:
        await server.backend.close()
    assert chat.status_code == 200 and chat.json()["token_ids"] == list(tokenizer.chat(messages))
    assert chat.json()["features"] is None and chat.json()["sampling_params"]["max_tokens"] == 7
    assert text.json()["token_ids"] == list(tokenizer.encode("hello world")) and text.json()["stream"] is True
    assert unknown_model.status_code == 404 and derender.status_code == 501
