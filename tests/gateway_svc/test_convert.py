"""The balancer's chunks -> OpenAI JSON."""

from gateway_svc import convert
from hetflow.runtime.openai_request import parse

SERVED = frozenset({"qwen2.5-1.5b-instruct"})


def test_streamed_chunks_and_whole_replies_have_openais_shape():
    parsed = parse("chat", {"model": "hetflow", "messages": [{"role": "user", "content": "hi"}], "stream": True},
                   {}, 1024, "hetflow", SERVED)
    first = convert.chunk_json(parsed, "m", "he", None, first=True)
    later = convert.chunk_json(parsed, "m", "llo", "length", first=False)
    assert first["object"] == "chat.completion.chunk" and first["choices"][0]["delta"] == {"role": "assistant",
                                                                                           "content": "he"}
    assert later["choices"][0] == {"index": 0, "delta": {"content": "llo"}, "logprobs": None,
                                   "finish_reason": "length"}
    whole = convert.reply_json(parsed, "m", "hello", "stop", 3, 2)
    assert whole["choices"][0]["message"]["content"] == "hello"
    assert whole["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
