"""The live harness's prompts: chat messages the servers count as the trace does, token for token, and
that a program's later calls send again."""

from collections import defaultdict

import pytest

from engine_svc.vllm_sim.tokenizer import PromptTokenizer
from hetflow.bench.prompts import PromptText, conversation, part_texts
from hetflow.core.trace import StageRecord
from hetflow.workloads.build import part_key
from hetflow.workloads.generate import FAMILIES, generate
from tests.factories import stage_record

MODEL = "qwen2.5-7b-instruct"


def server_count(text: PromptText, rec: StageRecord, answers: dict[int, str], model: str = "m",
                 texts: dict[str, str] | None = None) -> int:
    return len(PromptTokenizer().chat(conversation(rec, answers, text, model, texts)))


def answered(text: PromptText, records: list[StageRecord]) -> dict[str, dict[int, str]]:
    """Each program's answers by stage, as a server writes them (its filler, a call's output tokens)."""
    answers: dict[str, dict[int, str]] = defaultdict(dict)
    for r in records:
        answers[r.program_id][r.stage_index] = text.part(f"{r.program_id}/{r.stage_index}", r.output_tokens[MODEL])
    return answers


def test_a_prompt_part_has_exactly_its_tokens_and_equal_keys_give_equal_text(text):
    tokenizer = PromptTokenizer()
    part = text.part("system/abc", 137)
    assert len(tokenizer.encode(part, add_special_tokens=False)) == 137
    assert text.part("system/abc", 137) == part and text.part("system/abd", 137) != part
    joined = part + text.part("task/1", 50)  # parts joined stay each part's tokens
    assert len(tokenizer.encode(joined, add_special_tokens=False)) == 187


def test_a_calls_prompt_is_a_conversation_whose_answers_are_the_ancestors_own(text):
    rec = stage_record()
    rec.prompt_parts = [{"text": "system", "tokens": 20}, {"text": "task", "tokens": 30}, {"output_of": 1},
                        {"text": "review", "tokens": 25}]
    messages = conversation(rec, {1: " the plan"}, text, "m")
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]  # adjacent text parts merged
    first = text.template_tokens["first"]  # the template's tokens come out of the message's last part
    assert messages[0]["content"] == text.part("system", 20) + text.part("task", 30 - first)
    assert messages[1]["content"] == " the plan"
    ends_on_answer = stage_record()
    ends_on_answer.prompt_parts = [{"text": "system", "tokens": 20}, {"output_of": 1}]
    assert conversation(ends_on_answer, {1: " x"}, text, "m")[-1] == {"role": "user", "content": ""}


def test_a_parts_own_text_is_cut_to_its_tokens_and_filler_follows_a_shorter_one(text):
    tokenizer = PromptTokenizer()
    long_text = "OBSERVATION (step 6): the tests failed in module.py " * 20
    cut = text.part("obs", 30, long_text)
    assert len(tokenizer.encode(cut, add_special_tokens=False)) == 30 and long_text.startswith(cut)
    short = text.part("obs", 30, "OBSERVATION")
    assert short.startswith("OBSERVATION") and len(tokenizer.encode(short, add_special_tokens=False)) == 30
    assert text.part("obs", 30) == text.part("obs", 30, "") != cut  # no text: filler


def test_a_calls_own_system_prompt_goes_first_as_a_system_message_and_the_server_counts_it_as_the_trace(text):
    """Sent as user text, hetflow's QRF read no system prompt and predicted 1.2x its twin's remaining work."""
    model = "qwen2.5-7b-instruct"
    first, later = generate("agent", 1, 1, [model], rate_per_s=1.0)[:2]
    answers = {1: text.part("answer/1", first.output_tokens[model])}
    messages = conversation(later, answers, text, model)
    assert [m["role"] for m in messages[:3]] == ["system", "user", "assistant"]
    system_tokens = later.prompt_parts[0]["tokens"] - text.template_tokens["system"]
    assert messages[0]["content"] == text.part(later.prompt_parts[0]["text"], system_tokens)
    assert server_count(text, later, answers, model) == later.input_tokens[model]
    elsewhere = stage_record()  # a system prompt that is not the prompt's first part stays user text
    elsewhere.system_prompt = "you review"
    elsewhere.prompt_parts = [{"text": "task", "tokens": 30}, {"text": part_key("you review"), "tokens": 20}]
    assert [m["role"] for m in conversation(elsewhere, {}, text, "m")] == ["user"]


def test_the_server_counts_a_calls_prompt_as_the_trace_and_its_twin_do(text):
    """The chat template's own tokens come out of the prompt's text (an agent's 18-stage chain was 12 +
    14 per stage over the trace: 2% more work and KV live than in the simulated twin)."""
    records = generate("agent", 2, 1, [MODEL], rate_per_s=1.0)
    answers = answered(text, records)
    for rec in records:
        assert server_count(text, rec, answers[rec.program_id], MODEL) == rec.input_tokens[MODEL]
        texts = part_texts([r for r in records if r.program_id == rec.program_id])  # the trace's own texts, cut
        assert server_count(text, rec, answers[rec.program_id], MODEL, texts) == rec.input_tokens[MODEL]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_familys_calls_count_as_the_trace_at_the_server_or_as_the_template_alone(text, family):
    """Paid forward, the template tokens of a call's last message (a short turn, an empty one after an
    answer) stayed over the trace's count: 14-45% of the calls outside the agent family, up to 1.6% of the
    prompts' tokens. A prompt shorter than the template's own tokens (ShareGPT's shortest questions) counts
    those alone."""
    records = generate(family, 6, 1, [MODEL], rate_per_s=1.0)
    answers = answered(text, records)
    floor = text.template_tokens["first"] + text.template_tokens["system"]
    for rec in records:
        texts = part_texts([r for r in records if r.program_id == rec.program_id])
        counted = server_count(text, rec, answers[rec.program_id], MODEL, texts)
        assert counted == rec.input_tokens[MODEL] or counted <= floor and rec.input_tokens[MODEL] < counted


def test_a_message_shorter_than_its_template_tokens_takes_the_rest_from_the_answer_before_it(text):
    rec = stage_record(3)
    rec.prompt_parts = [{"text": "task", "tokens": 40}, {"output_of": 1}, {"text": "ok", "tokens": 2},
                        {"output_of": 2}, {"text": "more", "tokens": 60}]
    answers = {1: text.part("a1", 30), 2: text.part("a2", 20)}
    messages = conversation(rec, answers, text, "m")
    short_by = text.template_tokens["turn"] - 2  # "ok" gives its 2, the answer before it the rest
    assert messages[2]["content"] == "" and messages[1]["content"] == text.without_tail(answers[1], short_by)
    assert text.tokens_of(messages[1]["content"]) == 30 - short_by
    assert server_count(text, rec, answers) == 40 + 30 + 2 + 20 + 60
    ends_on_answer = stage_record(3)  # the empty user message after a last answer pays with that answer
    ends_on_answer.prompt_parts = [{"text": "task", "tokens": 40}, {"output_of": 1}, {"output_of": 2}]
    messages = conversation(ends_on_answer, answers, text, "m")
    assert messages[-1] == {"role": "user", "content": ""}
    assert server_count(text, ends_on_answer, answers) == 40 + 30 + 20


def test_a_chains_next_call_sends_its_last_calls_prompt_again_message_for_message(text):
    """What a short turn takes from the answer before it, every later call takes too: the server's
    cached prefix of the last call stays the start of the next."""
    records = generate("chat", 6, 1, [MODEL], rate_per_s=1.0)
    answers = answered(text, records)
    shortened = 0
    for program in (list(p) for _, p in sorted(_by_program(records).items())):
        texts = part_texts(program)
        for earlier, later in zip(program, program[1:]):
            sent_before = conversation(earlier, answers[earlier.program_id], text, MODEL, texts)
            assert conversation(later, answers[later.program_id], text, MODEL, texts)[:len(sent_before)] == sent_before
            shortened += any(m["role"] == "assistant" and m["content"] not in answers[earlier.program_id].values()
                             for m in sent_before)
    assert shortened  # some turn took from an answer: the case the test is for


def test_a_part_whose_text_would_run_into_the_one_before_goes_as_filler(text):
    texts = {"facts": "sources on the top", "ask": "how would you rewrite it"}  # "tophow": fewer tokens
    facts_tokens = text.tokens_of(texts["facts"])
    rec = stage_record()
    rec.prompt_parts = [{"text": "facts", "tokens": facts_tokens},
                        {"text": "ask", "tokens": 3 + text.template_tokens["first"]}]
    assert not text.joins_cleanly(texts["facts"], text.part("ask", 3, texts["ask"]))
    message = conversation(rec, {}, text, "m", texts)[0]["content"]
    assert message == texts["facts"] + text.part("ask", 3)
    assert server_count(text, rec, {}, texts=texts) == facts_tokens + 3 + text.template_tokens["first"]


def _by_program(records: list[StageRecord]) -> dict[str, list[StageRecord]]:
    programs: dict[str, list[StageRecord]] = defaultdict(list)
    for r in records:
        programs[r.program_id].append(r)
    return programs
