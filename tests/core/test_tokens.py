import random

import pytest

from hetflow.core import tokens
from hetflow.core.memo import BoundedMemo
from hetflow.core.tokens import CHUNK_CHARS, chunk_bounds, count_pieces, count_tokens

ALPHABET = ["a", "Z", "q", "7", "0", ".", "(", "é", "中", " ", "\n", "\t", "\u00a0", "_", "-"]


def random_text(rng: random.Random, length: int) -> str:
    """Words, numbers and punctuation, with runs long enough to cross a chunk's end and stretches with no
    whitespace at all."""
    parts: list[str] = []
    while sum(map(len, parts)) < length:
        kind = rng.random()
        if kind < 0.05:
            parts.append(rng.choice("abcXYZ") * rng.randint(CHUNK_CHARS // 2, CHUNK_CHARS * 2))
        elif kind < 0.08:
            parts.append("".join(rng.choice(ALPHABET[:9]) for _ in range(rng.randint(100, CHUNK_CHARS))))
        else:
            parts.append("".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 12))))
    return "".join(parts)[:length]


@pytest.mark.parametrize("seed", range(20))
def test_the_chunked_count_equals_the_whole_texts(seed: int) -> None:
    rng = random.Random(seed)
    text = random_text(rng, rng.randint(0, 6 * CHUNK_CHARS))
    assert count_tokens(text, BoundedMemo()) == count_pieces(text)


def test_chunks_cover_the_text_and_end_before_whitespace() -> None:
    text = random_text(random.Random(3), 8 * CHUNK_CHARS)
    bounds = chunk_bounds(text)
    assert bounds[0][0] == 0 and bounds[-1][1] == len(text)
    assert all(end == next_start for (_, end), (next_start, _) in zip(bounds, bounds[1:]))
    for start, end in bounds[:-1]:
        assert end - start >= CHUNK_CHARS and text[end].isspace()


def test_a_grown_prompt_counts_only_its_new_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent's next prompt is its last one plus a little: only the chunk where they part and what
    follows are counted again."""
    rng = random.Random(5)
    prompt = " ".join("word" * rng.randint(1, 3) for _ in range(4000))
    memo = BoundedMemo()
    count_tokens(prompt, memo)
    counted: list[str] = []
    monkeypatch.setattr(tokens, "count_pieces", lambda text: counted.append(text) or count_pieces(text))
    grown = prompt + " and a new question?"
    assert count_tokens(grown, memo) == count_pieces(grown)
    assert sum(map(len, counted)) <= 2 * CHUNK_CHARS + len(" and a new question?")
