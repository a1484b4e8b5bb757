"""Tool calls as Hermes-format text: rendered into prompts, read back out of answers, whole or streamed."""

import json

from hetflow.runtime.tool_calls import CallStream, Tool, ToolCall, assistant_text, parse_calls, tools_prompt

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'


def test_an_answer_with_a_call_is_its_text_and_the_call():
    text, calls = parse_calls(f"Let me look.\n{CALL}")
    assert text == "Let me look." and [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Oslo"})]
    assert calls[0].call_id.startswith("call_")


def test_a_block_that_is_not_a_named_json_object_stays_text():
    broken = "<tool_call>not json</tool_call>"
    assert parse_calls(broken) == (broken, [])
    assert parse_calls('<tool_call>{"arguments": {}}</tool_call>')[1] == []


def test_an_earlier_call_renders_as_the_model_writes_it_and_reads_back():
    rendered = assistant_text("ok", [ToolCall("call_1", "f", '{"x": 1}')])
    text, calls = parse_calls(rendered)
    assert text == "ok" and (calls[0].name, json.loads(calls[0].arguments)) == ("f", {"x": 1})


def test_the_tools_prompt_lists_each_signature():
    prompt = tools_prompt([Tool("get_weather", "weather now", {"type": "object"}), Tool("transfer_to_coder")])
    assert '"name": "get_weather"' in prompt and '"name": "transfer_to_coder"' in prompt and "<tool_call>" in prompt


def test_a_stream_sends_text_until_a_tag_even_one_split_across_chunks():
    stream = CallStream()
    pieces = ("Let me", " look.<tool", '_call>\n{"name": "f", ', '"arguments": {}}', "\n</tool_call>")
    sent = [stream.feed(piece) for piece in pieces]
    assert "".join(sent) == "Let me look." and sent[1] == " look."
    rest, calls = stream.finish()
    assert rest == "" and [c.name for c in calls] == ["f"]


def test_a_stream_without_a_call_holds_back_only_a_possible_tag_start():
    stream = CallStream()
    assert stream.feed("a <to") == "a " and stream.feed("p") == "<top"
    assert stream.finish() == ("", [])
