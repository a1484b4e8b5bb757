"""Fixtures the live harness's tests share."""

import pytest

from hetflow.bench.prompts import PromptText


@pytest.fixture(scope="module")
def text() -> PromptText:
    """The harness's prompt text in the servers' tokenizer (its template's tokens measured once a module)."""
    return PromptText()
