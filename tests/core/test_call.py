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
    assert len(counted) == 2  # the input and the user prompt: once each
    assert first == dataclasses.replace(first)  # the cached values are not fields
    moved = dataclasses.replace(first, prompt="short")
    assert moved.input_tokens == real("short")  # a changed call counts again
