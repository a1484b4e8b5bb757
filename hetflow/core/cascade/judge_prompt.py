"""The LLM judge's scoring prompt and the parse of its reply.

Single-answer grading as in the LLM-as-a-judge paper Cascadia uses (Zheng et al. 2023, MT-Bench): the
judge reads the question and the answer and rates the answer 1-10; Cascadia footnote 4 has it reply in
1-2 tokens. The rating times ten is the grade on the 0-100 scale of the thresholds.
"""

from __future__ import annotations

import re

from hetflow.core.cascade.config import SCORE_MAX

RATING_MAX = 10
JUDGE_PROMPT_TOKENS = 80
"""The scoring prompt's own tokens beside the question and the answer (``judge_messages``'s text): what
the planner and the simulator add to each judge call's prompt."""
JUDGE_SYSTEM = ("You are an impartial judge of answers written by an AI assistant. Rate how well the answer "
                "solves the user's request: correctness first, then helpfulness and detail. Use a scale of 1 "
                "(wrong or useless) to 10 (correct and complete). Reply with the number only.")
_RATING = re.compile(r"\d+")


def judge_messages(question: str, answer: str) -> tuple[tuple[str, str], ...]:
    """The chat the judge model is sent: the instructions, then the question and the answer."""
    return (("system", JUDGE_SYSTEM),
            ("user", f"[Question]\n{question}\n\n[Answer]\n{answer}\n\nRating (1-{RATING_MAX}):"))


def parse_grade(reply: str) -> float:
    """The judge's reply as a 0-100 grade: its first integer, which must be a rating in 1..10.
    Raises ValueError naming what came back otherwise."""
    found = _RATING.search(reply)
    if found is None:
        raise ValueError(f"no rating in the judge's reply {reply[:40]!r}")
    rating = int(found.group())
    if not 1 <= rating <= RATING_MAX:
        raise ValueError(f"rating {rating} outside 1..{RATING_MAX} in the judge's reply {reply[:40]!r}")
    return rating * SCORE_MAX / RATING_MAX
