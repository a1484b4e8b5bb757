import pytest

from engine_svc.vllm_sim.tokenizer import PromptTokenizer
from hetflow.bench.prompts import PromptText
from hetflow.core.tokens import count_tokens
from hetflow.runtime import tinymodel
from hetflow.runtime.model_tokenizer import ModelTokenizer, PromptCounter


def test_a_chats_count_is_its_servers_with_the_template_and_the_generation_prompt():
    text = PromptText()
    messages = (("system", text.part("s", 120)), ("user", text.part("u", 900)),
                ("assistant", text.part("a", 200)), ("user", text.part("u2", 300)))
    server = PromptTokenizer()
    counted = ModelTokenizer().prompt_tokens("", messages)
    assert counted == len(server.chat([{"role": r, "content": c} for r, c in messages]))
    assert counted > 120 + 900 + 200 + 300  # the template's own tokens come on top of the parts'
    assert counted != count_tokens("\n".join(c for _, c in messages))  # what the approximate count misses


def test_a_completion_prompt_is_counted_as_its_text_without_a_chat_template():
    tokenizer = ModelTokenizer()
    prompt = "def add(a, b):"
    assert tokenizer.prompt_tokens(prompt, ()) == len(tokenizer.encode(prompt))
    assert tokenizer.prompt_tokens(prompt, ()) < tokenizer.prompt_tokens("", (("user", prompt),))


def test_models_sharing_a_tokenizer_count_once_and_the_largest_count_wins():
    one = str(tinymodel.DEFAULT_DIR)
    counter = PromptCounter({"a": one, "b": one})
    assert counter("x = 1", ()) == ModelTokenizer(one).prompt_tokens("x = 1", ())


def test_a_chat_the_models_template_refuses_is_the_callers_invalid_argument():
    """A Llama or Mistral template raises on roles that do not alternate (``raise_exception``): the
    caller's INVALID_ARGUMENT, as vLLM's server answers 400, not an INTERNAL tried on every engine."""
    from hetflow.core.errors import InvalidArgument

    tokenizer = ModelTokenizer()
    tokenizer._tokenizer.chat_template = (
        "{% if messages[0]['role'] == messages[1]['role'] %}"
        "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
        "{% for m in messages %}{{ m['content'] }}{% endfor %}")
    with pytest.raises(InvalidArgument, match="roles must alternate"):
        tokenizer.chat([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    assert tokenizer.chat([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
