"""A call's derived texts and token counts are computed once and never make two equal calls differ."""

import dataclasses

from hetflow.core import call as call_module
from tests.factories import call


def test_the_token_counts_are_counted_once_per_call_and_equality_ignores_them(monkeypatch):
    counted = []
    real = call_module.count_tokens
    monkeypatch.setattr(call_module, "count_tokens", lambda text: counted.append(text) or real(text))
    first = call(prompt="a long agent context " * 100)
    for _ in range(5):
        assert first.input_tokens == real(first.full_input) and first.user_prompt_tokens > 0
    assert len(counted) == 1  # a prompt (not a chat) is its input and its user prompt: counted once
    chat = dataclasses.replace(first, prompt="", messages=(("system", "be brief"), ("user", "a question " * 50)))
    assert chat.input_tokens == real(chat.full_input) and chat.user_prompt_tokens == real("a question " * 50)
    assert len(counted) == 3  # a chat's input and last user turn differ: once each
    assert first == dataclasses.replace(first)  # the cached values are not fields
    moved = dataclasses.replace(first, prompt="short")
    assert moved.input_tokens == real("short")  # a changed call counts again


def test_a_stage_index_past_any_workflow_is_invalid_even_without_a_count():
    """The monitor keys what it learns by stage: an index of four billion would make a key of its own."""
    import pytest

    from hetflow.core.errors import InvalidArgument

    call_module.check_stages(3, 0)
    with pytest.raises(InvalidArgument, match="stage_index must be at most"):
        call_module.check_stages(call_module.MAX_STAGES + 1, 0)
