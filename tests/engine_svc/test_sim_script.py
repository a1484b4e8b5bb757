"""Scripted answers for the sim backend: the first rule whose patterns match answers, streamed a word a
token; a call none matches gets filler; a short max_tokens cuts the answer."""

import pytest

from engine_svc.backends.base import GenerateCall
from engine_svc.backends.sim import SimBackend
from engine_svc.backends.sim_script import answer_tokens, parse_script
from hetflow.core.call import SamplingSpec
from hetflow.core.engine.aging_queue import AgingPriorityQueue
from hetflow.core.engine.profile import load_profile
from tests.factories import MovedClock

SCRIPT = parse_script([
    {"when": {"system": "triage", "last": "bug"}, "reply": '<tool_call>{"name": "transfer_to_coder"}</tool_call>'},
    {"when": {"system": "coder"}, "reply": "def add(a, b):\n    return a + b"},
], "test")


def chat(request_id: str, system: str, last: str, max_tokens: int = 64) -> GenerateCall:
    return GenerateCall(request_id, "", (("system", system), ("user", last)), SamplingSpec(max_tokens=max_tokens),
                        0.0)


def test_the_first_matching_rule_answers():
    assert SCRIPT.reply_for([("system", "you are the triage agent"), ("user", "a bug")]).startswith("<tool_call>")
    assert SCRIPT.reply_for([("system", "you are the coder"), ("user", "anything")]).startswith("def add")
    assert SCRIPT.reply_for([("system", "you are the triage agent"), ("user", "hello")]) is None
    assert "".join(answer_tokens("def add(a, b):\n    return a + b")) == "def add(a, b):\n    return a + b"


@pytest.mark.parametrize("raw", [[], [{"when": {"system": "x"}}], [{"when": {"agent": "x"}, "reply": "y"}],
                                 [{"when": {"system": "("}, "reply": "y"}]])
def test_a_malformed_script_is_refused(raw):
    with pytest.raises(ValueError):
        parse_script(raw, "test")


async def run(backend: SimBackend, call: GenerateCall) -> tuple[str, str]:
    text, reason = "", ""
    async for delta in backend.generate(call):
        text += delta.text
        reason = delta.finish_reason or reason
    return text, reason


async def test_the_backend_streams_the_scripted_answer_and_filler_for_the_rest():
    backend = SimBackend("m", load_profile("qwen2.5-1.5b-instruct@a6000"), AgingPriorityQueue(), 8, MovedClock(),
                         script=SCRIPT)
    await backend.start()
    coded = await run(backend, chat("a", "you are the coder", "add"))
    cut = await run(backend, chat("b", "you are the coder", "add", max_tokens=2))
    filler = await run(backend, chat("c", "nobody", "hi"))
    await backend.close()
    assert coded == ("def add(a, b):\n    return a + b", "stop")
    assert cut == ("def add(a,", "length")
    assert filler[0] and not filler[0].startswith("def add")
