"""Responses API JSON -> a hetflow call: instructions, the stored conversation and the input as turns,
function calls and their outputs, the program a conversation continues, and 400s naming the field."""

import pytest

from hetflow.runtime import responses_request
from hetflow.runtime.openai_request import OpenAIError
from hetflow.runtime.responses_request import Conversation

SERVED = frozenset({"qwen2.5-1.5b-instruct"})


def parse_responses(body, headers=None, previous=None):
    return responses_request.parse_responses(body, headers or {}, 1024, "hetflow", SERVED, previous)


def test_a_response_request_is_instructions_then_the_stored_conversation_then_the_input():
    previous = Conversation((("user", "plan"), ("assistant", "a plan")), "resp_first")
    body = {"model": "hetflow", "instructions": "be brief", "max_output_tokens": 9,
            "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
                      {"type": "reasoning", "summary": []}]}
    request = parse_responses(body, previous=previous).request
    assert [(m.role, m.content) for m in request.messages] == [
        ("system", "be brief"), ("user", "plan"), ("assistant", "a plan"), ("user", "go")]
    wf = request.workflow
    assert (wf.program_id, wf.identity_source, wf.HasField("stage_index")) == ("resp_first", "previous_response_id",
                                                                            False)
    assert request.sampling.max_tokens == 9 and request.request_id.startswith("resp_")


def test_a_stored_response_is_a_program_of_unknown_length_and_an_unstored_one_a_single_call():
    stored = parse_responses({"model": "hetflow", "input": "hi"}).request
    assert (stored.workflow.program_id, stored.workflow.identity_source) == (stored.request_id, "response")
    assert not stored.workflow.HasField("stage_count")
    single = parse_responses({"model": "hetflow", "input": "hi", "store": False}).request.workflow
    assert (single.identity_source, single.stage_index, single.stage_count) == ("none", 1, 1)
    session = parse_responses({"model": "hetflow", "input": "hi"}, {"x-session-id": "s1"}).request.workflow
    assert (session.program_id, session.identity_source) == ("s1", "x-session-id")


@pytest.mark.parametrize("body, param", [
    ({"model": "hetflow"}, "input"),
    ({"model": "hetflow", "input": [{"type": "computer_call", "call_id": "c"}]}, "input[0].type"),
    ({"model": "hetflow", "input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
    ({"model": "hetflow", "input": "x", "text": {"format": {"type": "json_schema"}}}, "text.format"),
    ({"model": "hetflow", "input": "x", "background": True}, "background"),
    ({"model": "hetflow", "input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ({"model": "hetflow", "input": "x", "store": "yes"}, "store"),
    ({"model": "hetflow", "input": "x", "top_logprobs": 2}, "top_logprobs"),
    ({"model": "hetflow", "input": "x", "include": ["message.output_text.logprobs"]}, "include"),
    ({"model": "hetflow", "input": "x", "metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
    ({"model": "hetflow", "input": "x", "metadata": {"k": 1}}, "metadata"),
    ({"model": "hetflow", "input": "x", "metadata": {"k" * 65: "v"}}, "metadata"),
    ({"model": "hetflow", "input": "x", "user": 7}, "user"),
    ({"model": "hetflow", "input": "x", "tool_choice": "required",
      "tools": [{"type": "function", "name": "f"}]}, "tool_choice"),
])
def test_what_responses_do_not_serve_is_a_400_naming_it(body, param):
    with pytest.raises(OpenAIError) as caught:
        parse_responses(body)
    assert (caught.value.status_code, caught.value.param) == (400, param)


def test_responses_function_calls_and_their_outputs_are_turns_and_flat_tools_are_offered():
    body = {"model": "hetflow", "instructions": "triage", "tools": [{"type": "function", "name": "transfer_to_coder",
                                                                    "parameters": {"type": "object"}}],
            "input": [{"role": "user", "content": "fix it"},
                      {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
                      {"type": "function_call", "call_id": "c2", "name": "lookup", "arguments": "{}"},
                      {"type": "function_call_output", "call_id": "c1", "output": "found"}]}
    parsed = parse_responses(body)
    turns = [(m.role, m.content) for m in parsed.request.messages]
    assert turns[0][0] == "system" and "transfer_to_coder" in turns[0][1]
    assert turns[2][0] == "assistant" and turns[2][1].count("<tool_call>") == 2   # one turn for both calls
    assert turns[3] == ("user", "<tool_response>\nfound\n</tool_response>")
    assert [t.name for t in parsed.tools] == ["transfer_to_coder"]
