"""Each API's shapes of an answer that calls tools, whole and streamed, without a server."""

import json

from gateway_svc.responses import ChatReply
from gateway_svc.responses_api import ResponsesReply
from hetflow.runtime import openai_request, responses_request

SERVED = frozenset({"m"})
TOOL = {"type": "function", "function": {"name": "get_weather"}}
ANSWER = ["Checking.", '<tool_call>\n{"name": "get_weather", ', '"arguments": {"city": "Oslo"}}\n</tool_call>']


def events(frames: list[bytes]) -> list[dict]:
    out = []
    for frame in b"".join(frames).decode().split("\n\n"):
        data = [line[6:] for line in frame.splitlines() if line.startswith("data: ")]
        if data and data[0] != "[DONE]":
            out.append(json.loads(data[0]))
    return out


def chat_reply(stream: bool) -> ChatReply:
    body = {"model": "m", "messages": [{"role": "user", "content": "weather?"}], "tools": [TOOL], "stream": stream}
    return ChatReply(openai_request.parse("chat", body, {}, 64, "hetflow", SERVED))


def test_a_whole_chat_answer_that_calls_a_tool_has_tool_calls_and_no_content():
    body = chat_reply(False).whole("m", "".join(ANSWER[1:]), "stop", 5, 9, {})
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    call = choice["message"]["tool_calls"][0]
    assert call["function"]["name"] == "get_weather" and json.loads(call["function"]["arguments"]) == {"city": "Oslo"}


def test_a_streamed_chat_answer_sends_its_text_then_the_calls_with_the_last_chunk():
    reply = chat_reply(True)
    frames = [f for i, piece in enumerate(ANSWER)
              for f in reply.text("m", piece, "stop" if i == len(ANSWER) - 1 else None, None)]
    sent = events(frames)
    assert "".join(e["choices"][0]["delta"].get("content") or "" for e in sent) == "Checking."
    last = sent[-1]["choices"][0]
    assert last["finish_reason"] == "tool_calls" and last["delta"]["tool_calls"][0]["index"] == 0
    assert last["delta"]["tool_calls"][0]["function"]["name"] == "get_weather"


def responses_reply(stored: list) -> ResponsesReply:
    body = {"model": "m", "input": "weather?", "tools": [{"type": "function", "name": "get_weather"}]}
    parsed = responses_request.parse_responses(body, {}, 64, "hetflow", SERVED, None)
    return ResponsesReply(parsed, body, "", lambda rid, s: stored.append(s))


def test_a_whole_response_that_calls_a_tool_has_a_message_then_a_function_call_item_and_is_stored():
    stored: list = []
    body = responses_reply(stored).whole("m", "".join(ANSWER), "stop", 5, 9, {})
    assert [o["type"] for o in body["output"]] == ["message", "function_call"]
    call = body["output"][1]
    assert (call["name"], json.loads(call["arguments"]), call["status"]) == ("get_weather", {"city": "Oslo"},
                                                                            "completed")
    assert stored and "<tool_call>" in stored[0].conversation.messages[-1][1]   # the call is in the history


def test_a_streamed_response_that_calls_a_tool_sends_the_function_call_items_events():
    reply = responses_reply([])
    frames = reply.opening("m", {})
    for piece in ANSWER:
        frames += reply.text("m", piece, None, None)
    frames += reply.closing("m", "stop", 5, 9)
    kinds = [e["type"] for e in events(frames)]
    assert kinds == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added", "response.output_text.delta", "response.output_text.done",
                     "response.content_part.done", "response.output_item.done", "response.output_item.added",
                     "response.function_call_arguments.delta", "response.function_call_arguments.done",
                     "response.output_item.done", "response.completed"]
    assert events(frames)[-1]["response"]["output"][1]["type"] == "function_call"


def streamed(pieces: list[str]) -> list[dict]:
    reply = responses_reply([])
    frames = reply.opening("m", {})
    for piece in pieces:
        frames += reply.text("m", piece, None, None)
    return events(frames + reply.closing("m", "stop", 5, 9))


def test_whitespace_before_a_call_closes_its_message_and_the_call_is_the_next_item():
    sent = streamed(["\n", ANSWER[1], ANSWER[2]])
    done = [e for e in sent if e["type"] == "response.output_item.done"]
    assert [(e["output_index"], e["item"]["type"]) for e in done] == [(0, "message"), (1, "function_call")]
    assert [o["type"] for o in sent[-1]["response"]["output"]] == ["message", "function_call"]


def test_a_held_back_tail_goes_out_as_a_delta_and_the_deltas_are_the_message():
    sent = streamed(["a < b <to", "p"])
    deltas = "".join(e["delta"] for e in sent if e["type"] == "response.output_text.delta")
    assert deltas == "a < b <top" == sent[-1]["response"]["output"][0]["content"][0]["text"]
    sent = streamed(["a < b <tool"])                            # ends while a tag might have begun
    deltas = "".join(e["delta"] for e in sent if e["type"] == "response.output_text.delta")
    assert deltas == "a < b <tool" == sent[-1]["response"]["output"][0]["content"][0]["text"]


def test_with_parallel_tool_calls_off_the_first_call_alone_is_returned_whole_and_streamed():
    body = {"model": "m", "messages": [{"role": "user", "content": "weather?"}], "tools": [TOOL],
            "parallel_tool_calls": False}
    two_calls = "".join(ANSWER[1:]) + ANSWER[1].replace("get_weather", "get_time") + ANSWER[2]
    whole = ChatReply(openai_request.parse("chat", body, {}, 64, "hetflow", SERVED)).whole(
        "m", two_calls, "stop", 5, 9, {})
    assert [c["function"]["name"] for c in whole["choices"][0]["message"]["tool_calls"]] == ["get_weather"]
    streamed = ChatReply(openai_request.parse("chat", {**body, "stream": True}, {}, 64, "hetflow", SERVED))
    last = events(streamed.text("m", two_calls, "stop", None))[-1]["choices"][0]
    assert [c["function"]["name"] for c in last["delta"]["tool_calls"]] == ["get_weather"]
    parallel = ChatReply(openai_request.parse("chat", {**body, "parallel_tool_calls": True}, {}, 64, "hetflow", SERVED))
    assert len(parallel.whole("m", two_calls, "stop", 5, 9, {})["choices"][0]["message"]["tool_calls"]) == 2


def test_a_continued_conversation_is_stored_with_the_earlier_turns_own_strings_and_counts_what_it_adds():
    """A chain of N turns would otherwise keep N copies of its history (memory growing with N squared)."""
    stored: list = []
    first_body = {"model": "m", "instructions": "be brief", "input": "plan it"}
    first = responses_request.parse_responses(first_body, {}, 64, "hetflow", SERVED, None)
    ResponsesReply(first, first_body, "", lambda rid, s: stored.append(s)).whole("m", "a plan", "stop", 5, 2, {})
    body = {"model": "m", "input": "go on", "previous_response_id": "resp_1"}
    parsed = responses_request.parse_responses(body, {}, 64, "hetflow", SERVED, stored[0].conversation)
    later_body = ResponsesReply(parsed, body, "", lambda rid, s: stored.append(s)).whole("m", "done", "stop", 9, 1, {})
    earlier, later = stored[0].conversation.messages, stored[1].conversation.messages
    assert later == (("user", "plan it"), ("assistant", "a plan"), ("user", "go on"), ("assistant", "done"))
    assert all(a[1] is b[1] for a, b in zip(earlier, later))
    assert stored[1].own_chars == len("go on") + len(json.dumps(later_body))   # its input, and its body
