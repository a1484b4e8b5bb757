"""Approximate token counts where no tokenizer is at hand (sim engines, predictor features).

Splits on word runs, digit runs and single punctuation marks, and charges long words one token
per 4 characters, which lands within ~15% of BPE counts on English prose and code. Real engines
report their own tokenizer's counts.
"""

from __future__ import annotations

import re

_PIECE = re.compile(r"[A-Za-z]+|\d+|[^\sA-Za-z\d]")


def count_tokens(text: str) -> int:
    return sum(1 + (len(p) - 1) // 4 for p in _PIECE.findall(text))


def render_chat(messages: list[tuple[str, str]]) -> str:
    """The plain chat rendering used where a model has no chat template of its own."""
    return "".join(f"<|{role}|>\n{content}\n" for role, content in messages) + "<|assistant|>\n"
