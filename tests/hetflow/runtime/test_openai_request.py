"""OpenAI JSON -> a hetflow call: workflow metadata, sampling, and 4xx errors naming the field."""

import pytest

from hetflow.runtime import openai_request
from hetflow.runtime.openai_request import OpenAIError

SERVED = frozenset({"qwen2.5-1.5b-instruct", "qwen2.5-7b-instruct"})


def parse(body, headers=None, kind="chat"):
    return openai_request.parse(kind, body, headers or {}, 1024, "hetflow", SERVED)


def chat(**extra):
    return {"model": "hetflow", "messages": [{"role": "user", "content": "hi"}], **extra}


def error_of(body, headers=None, kind="chat") -> OpenAIError:
    with pytest.raises(OpenAIError) as caught:
        parse(body, headers, kind)
    return caught.value


def test_a_request_without_metadata_is_a_one_call_program():
    request = parse(chat()).request
    assert request.workflow.program_id == request.request_id
    assert (request.workflow.stage_index, request.workflow.stage_count) == (1, 1)
    assert request.model_pin == "" and request.sampling.max_tokens == 1024


def test_headers_carry_the_workflow_and_the_body_object_adds_to_them():
    headers = {"x-hetflow-program-id": "p1", "x-hetflow-agent": "coder", "x-hetflow-stage": "3",
               "x-hetflow-stage-count": "4", "x-hetflow-upstream-agent": "planner",
               "x-hetflow-deadline-unix-s": "1900000000.5", "x-hetflow-receipt": "true"}
    request = parse(chat(hetflow={"agent": "coder", "stage_index": 3}), headers).request
    wf = request.workflow
    assert (wf.program_id, wf.agent, wf.stage_index, wf.stage_count, wf.upstream_agent) == (
        "p1", "coder", 3, 4, "planner")
    assert wf.deadline_unix_s == 1900000000.5 and request.want_receipt and wf.identity_source == "hetflow"


def test_a_header_and_the_body_object_that_disagree_are_refused_naming_both():
    error = error_of(chat(hetflow={"agent": "qa"}), {"x-hetflow-program-id": "p1", "x-hetflow-agent": "coder"})
    assert error.status_code == 400 and error.param == "hetflow.agent"
    assert "x-hetflow-agent" in error.message and "'coder'" in error.message and "'qa'" in error.message


def test_a_served_model_pins_it_and_sampling_fields_pass_through():
    request = parse(chat(model="qwen2.5-7b-instruct", max_completion_tokens=7, temperature=0.2, top_p=0.9, seed=3,
                         stop="END", ignore_eos=True)).request
    s = request.sampling
    assert request.model_pin == "qwen2.5-7b-instruct"
    assert (s.max_tokens, round(s.temperature, 3), round(s.top_p, 3), s.seed, list(s.stop), s.ignore_eos) == (
        7, 0.2, 0.9, 3, ["END"], True)
    assert not s.HasField("presence_penalty") and not s.HasField("frequency_penalty")


def test_the_penalties_pass_through_to_the_engines():
    s = parse(chat(presence_penalty=0.5, frequency_penalty=-1)).request.sampling
    assert (s.presence_penalty, s.frequency_penalty) == (0.5, -1.0)


def test_text_parts_and_the_developer_role_become_plain_messages():
    body = chat(messages=[{"role": "developer", "content": "be brief"},
                          {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}])
    messages = parse(body).request.messages
    assert [(m.role, m.content) for m in messages] == [("system", "be brief"), ("user", "ab")]


def test_completions_take_one_prompt_string():
    parsed = parse({"model": "hetflow", "prompt": ["once upon"], "max_tokens": 5, "stream": True,
                    "stream_options": {"include_usage": True}}, kind="completion")
    assert parsed.request.prompt == "once upon" and parsed.stream and parsed.include_usage
    assert parsed.request.request_id.startswith("cmpl-")


@pytest.mark.parametrize("body, headers, status, param", [
    ([1, 2], {}, 400, None),
    ({"messages": [{"role": "user", "content": "x"}]}, {}, 400, "model"),
    (chat(model="gpt-4o"), {}, 404, "model"),
    ({"model": "hetflow"}, {}, 400, "messages"),
    (chat(messages=[{"role": "function", "content": "x"}]), {}, 400, "messages[0].role"),
    (chat(messages=[{"role": "user", "content": [{"type": "image_url"}]}]), {}, 400, "messages[0].content[0]"),
    (chat(max_tokens=0), {}, 400, "max_tokens"),
    (chat(temperature="hot"), {}, 400, "temperature"),
    (chat(n=2), {}, 400, "n"),
    (chat(n=True), {}, 400, "n"),
    (chat(stream=True, stream_options={"include_usage": "false"}), {}, 400, "stream_options.include_usage"),
    (chat(stop=[1]), {}, 400, "stop"),
    (chat(stream="yes"), {}, 400, "stream"),
    (chat(), {"x-hetflow-deadline-unix-s": "tomorrow"}, 400, "deadline_unix_s"),
    (chat(), {"x-hetflow-deadline-unix-s": "-5"}, 400, "deadline_unix_s"),
    (chat(), {"x-hetflow-stage": "first"}, 400, "stage_index"),
    (chat(), {"x-hetflow-receipt": "maybe"}, 400, "receipt"),
    (chat(hetflow={"program": "p"}), {}, 400, "hetflow.program"),
    (chat(hetflow={"agent": 3}), {}, 400, "agent"),
    (chat(presence_penalty=2.5), {}, 400, "presence_penalty"),
    (chat(frequency_penalty="high"), {}, 400, "frequency_penalty"),
    (chat(tools=[{"type": "function", "function": {"name": "f"}}], tool_choice="required"), {}, 400, "tool_choice"),
    (chat(tools=[{"type": "function", "function": {"name": "f"}}],
          tool_choice={"type": "function", "function": {"name": "f"}}), {}, 400, "tool_choice"),
    (chat(parallel_tool_calls="no"), {}, 400, "parallel_tool_calls"),
])
def test_bad_input_is_a_4xx_naming_the_field(body, headers, status, param):
    error = error_of(body, headers)
    assert (error.status_code, error.param) == (status, param)
    assert error.body()["error"]["message"]


def test_the_unknown_model_error_is_openais_model_not_found():
    body = error_of(chat(model="gpt-4o")).body()["error"]
    assert body["code"] == "model_not_found" and "qwen2.5-7b-instruct" in body["message"]


def test_vllm_agentic_context_names_the_program_and_hetflow_per_call_fields_still_apply():
    body = chat(vllm_xargs={"agentic_context": '{"task_id": "t1", "agent_id": "coder", "parent_agent_id": "planner"}'},
                hetflow={"workflow": "code", "receipt": True})
    request = parse(body).request
    wf = request.workflow
    assert (wf.program_id, wf.agent, wf.upstream_agent, wf.workflow, wf.identity_source) == (
        "t1", "coder", "planner", "code", "agentic_context")
    assert request.want_receipt and not wf.HasField("stage_index")


def test_a_framework_session_header_names_the_program():
    wf = parse(chat(), {"session-id": "codex-1", "thread-id": "worker"}).request.workflow
    assert (wf.program_id, wf.agent, wf.upstream_agent, wf.identity_source) == ("codex-1", "worker", "", "codex")


def test_hetflow_fields_outrank_every_other_convention():
    body = chat(hetflow={"program_id": "p1"}, vllm_xargs={"agentic_context": {"task_id": "t1"}},
                agent_hint={"session_id": "h1"})
    wf = parse(body, {"x-session-id": "s1"}).request.workflow
    assert (wf.program_id, wf.identity_source) == ("p1", "hetflow")


def test_a_request_with_no_convention_says_so():
    assert parse(chat()).request.workflow.identity_source == "none"


@pytest.mark.parametrize("body, headers, param", [
    (chat(vllm_xargs={"agentic_context": "{oops"}), {}, "vllm_xargs.agentic_context"),
    (chat(vllm_xargs="x"), {}, "vllm_xargs"),
    (chat(agent_hint={"session_id": 7.5}), {}, "agent_hint.session_id"),
    (chat(), {"x-session-id": "s" * 300}, "x-session-id"),
    (chat(hetflow={"program_id": "p\x00"}), {}, "program_id"),
])
def test_malformed_identity_is_a_400_naming_the_field(body, headers, param):
    error = error_of(body, headers)
    assert (error.status_code, error.param) == (400, param)


WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def test_chat_tools_go_into_the_system_prompt_and_earlier_calls_and_results_into_turns():
    body = chat(tools=[WEATHER], messages=[
        {"role": "system", "content": "be useful"}, {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}])
    parsed = parse(body)
    roles = [(m.role, m.content) for m in parsed.request.messages]
    assert roles[0][0] == "system" and roles[0][1].startswith("be useful\n\n# Tools") and "get_weather" in roles[0][1]
    assert roles[2][0] == "assistant" and '"name": "get_weather"' in roles[2][1] and "<tool_call>" in roles[2][1]
    assert roles[3] == ("user", "<tool_response>\nsunny\n</tool_response>")
    assert [t.name for t in parsed.tools] == ["get_weather"]
    assert parse(chat(tools=[WEATHER], tool_choice="none")).tools == ()


@pytest.mark.parametrize("tools, param", [
    ([{"type": "function"}], "tools[0].function.name"),
    ([{"type": "code_interpreter"}], "tools[0]"),
    ("x", "tools"),
])
def test_malformed_tools_are_a_400_naming_the_field(tools, param):
    assert error_of(chat(tools=tools)).param == param


def test_a_session_without_an_agent_names_each_agent_by_its_instructions():
    def agent_of(system: str, **headers: str) -> str:
        body = chat(messages=[{"role": "system", "content": system}, {"role": "user", "content": "go"}],
                    tools=[WEATHER])
        return parse(body, headers).request.workflow.agent

    triage, coder = agent_of("You triage.", **{"x-session-id": "s"}), agent_of("You code.", **{"x-session-id": "s"})
    assert triage.startswith("agent-") and coder.startswith("agent-") and triage != coder
    assert agent_of("You triage.", **{"x-session-id": "other"}) == triage        # the same agent in every run
    assert agent_of("You triage.", **{"x-hetflow-program-id": "p"}) == ""          # hetflow's own: as sent
    assert agent_of("You triage.", **{"x-claude-code-session-id": "c", "x-claude-code-agent-id": "a"}) == "a"


def test_a_deeply_nested_context_or_an_unhashable_role_is_a_400_not_a_crash():
    deep = "[" * 100_000 + "]" * 100_000
    assert error_of(chat(vllm_xargs={"agentic_context": deep[:16000]})).status_code == 400
    assert error_of(chat(messages=[{"role": ["user"], "content": "x"}])).param == "messages[0].role"


@pytest.mark.parametrize("body, headers", [
    (chat(max_tokens=2**40), None),
    (chat(seed=2**70), None),
    ({"model": "hetflow", "messages": [{"role": "user", "content": "\ud800"}]}, None),
    (chat(), {"x-hetflow-program-id": "p1", "x-hetflow-stage": str(2**40)}),
    (chat(temperature=10**400), None),
    (chat(hetflow={"program_id": "p1", "deadline_unix_s": 10**400}), None),
], ids=["max_tokens past uint32", "seed past uint64", "a lone surrogate", "a stage past uint32",
        "a number past a float", "a deadline past a float"])
def test_a_value_the_wire_cannot_carry_is_a_400(body, headers):
    error = error_of(body, headers)
    assert error.status_code == 400 and "cannot carry" in error.message


def test_a_responses_value_the_wire_cannot_carry_is_a_400_too():
    from hetflow.runtime.responses_request import parse_responses

    with pytest.raises(OpenAIError) as caught:
        parse_responses({"model": "hetflow", "input": "hi", "max_output_tokens": 2**40}, {}, 1024, "hetflow", SERVED,
                        None)
    assert caught.value.status_code == 400


@pytest.mark.parametrize("code, status", [("ALREADY_EXISTS", 409), ("CANCELLED", 503), ("UNAVAILABLE", 503),
                                          ("RESOURCE_EXHAUSTED", 429), ("DATA_LOSS", 500)])
def test_a_status_from_the_balancer_is_its_http_status(code, status):
    """A CANCELLED that reaches the gateway is a server's (gRPC cancels calls it cannot take in time under
    overload; the client's own leaving sends no reply): a 503 the client's SDK retries, not a 499."""
    import grpc

    error = openai_request.from_status(getattr(grpc.StatusCode, code), "why")
    assert error.status_code == status and error.body()["error"]["code"] == code.lower()


@pytest.mark.parametrize("field, value", [
    ("logprobs", True), ("logprobs", 5), ("top_logprobs", 3), ("echo", True), ("best_of", 3), ("best_of", True),
    ("response_format", {"type": "json_schema", "json_schema": {"name": "a", "schema": {}}}),
    ("response_format", {"type": "json_object"}), ("logit_bias", {"50256": -100})])
def test_asking_for_what_hetflows_engines_do_not_return_is_a_400_naming_the_field(field, value):
    with pytest.raises(OpenAIError) as refused:
        openai_request.refuse_what_the_engines_cannot_give({"model": "hetflow", field: value})
    assert (refused.value.status_code, refused.value.param) == (400, field)


def test_fields_that_ask_for_nothing_the_engines_lack_pass():
    """What clients send by default (the OpenAI SDK's, LangChain's): log-probabilities off, a text format."""
    for body in (chat(logprobs=False, top_logprobs=0, response_format={"type": "text"}, logit_bias={}),
                 {"model": "hetflow", "prompt": "x", "logprobs": 0, "echo": False, "best_of": 1}):
        openai_request.refuse_what_the_engines_cannot_give(body)
    assert parse(chat(stream=True, stream_options={"include_usage": None})).include_usage is False


def test_a_never_fitting_calls_refusal_is_a_400_wherever_it_comes_from():
    """The balancer's hint-less RESOURCE_EXHAUSTED on the relay path (sent on the wire with pushback -1)
    and on the direct path (a decision stream's item, raised here) are the same 400."""
    import grpc

    from hetflow.runtime.interceptors import rpc_error

    error = openai_request.from_grpc(rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "call needs 9000 KV tokens"))
    assert (error.status_code, error.code) == (400, "context_length_exceeded") and "9000" in error.message
    busy = openai_request.from_grpc(rpc_error(grpc.StatusCode.RESOURCE_EXHAUSTED, "queue full", 2.0))
    assert busy.status_code == 429 and busy.headers() == {"retry-after": "2"}
