"""Prefix identity: chained block hashes of prompt parts and of text."""

from hetflow.core.memo import BoundedMemo
from hetflow.core.prefix import (
    SEGMENT_BLOCKS,
    TEXT_BLOCK_CHARS,
    BlockHasher,
    PromptPart,
    chained_block_hashes,
    leading_matches,
    text_block_hashes,
    token_block_hashes,
)
from tests.factories import block_hashes_of


def test_a_prompt_that_extends_another_shares_all_its_full_blocks():
    parent = [PromptPart("system", 20), PromptPart("task", 30)]             # 50 tokens: 3 full blocks
    child = [*parent, PromptPart("p/1/m", 40), PromptPart("coder", 10)]     # 100 tokens: 6 full blocks
    a, b = block_hashes_of(parent, 16), block_hashes_of(child, 16)
    assert len(a) == 3 and len(b) == 6 and b[:3] == a


def test_a_different_early_part_changes_every_later_block():
    a = block_hashes_of([PromptPart("system", 16), PromptPart("task", 32)], 16)
    b = block_hashes_of([PromptPart("other", 16), PromptPart("task", 32)], 16)
    assert not set(a) & set(b)                                               # chained on the first block


def test_a_block_is_its_content_not_how_the_parts_were_cut():
    whole = block_hashes_of([PromptPart("x", 32)], 16)
    assert whole == block_hashes_of([PromptPart("x", 32)], 16)
    assert whole[0] != block_hashes_of([PromptPart("y", 16), PromptPart("x", 16)], 16)[0]


def test_text_hashes_are_stable_and_chained():
    text = "a" * 64 + "b" * 64 + "c" * 10
    hashes = text_block_hashes(text)
    assert len(hashes) == 2 and hashes == text_block_hashes(text)           # the 10-char tail fills no block
    assert text_block_hashes("z" * 64 + "b" * 64)[1] != hashes[1]
    assert all(0 <= h < 2 ** 63 for h in hashes)


CODE = "".join(f"line {i}: def f_{i}(x): return x * {i}\n" for i in range(400))


def test_text_hashes_are_the_same_in_every_process_and_release():
    """Balancers and the monitor compare these: pinned to the values the unsegmented hashing gave (c680c1b)."""
    hashes = text_block_hashes(CODE, memo=BoundedMemo())
    assert len(hashes) == 238 and hashes[0] == 4167472507264733278 and hashes[-1] == 2516227139060342554


def test_remembered_segments_give_the_hashes_of_hashing_from_scratch():
    """A grown prompt, and a segment whose text repeats after a different prefix, each equal the whole
    text hashed in one chain."""
    memo: BoundedMemo = BoundedMemo()
    segment_chars = SEGMENT_BLOCKS * TEXT_BLOCK_CHARS
    texts = [CODE, CODE + "and a question?" * 40, CODE[:segment_chars] + "x" * segment_chars + CODE[segment_chars:],
             "y" * segment_chars + CODE[segment_chars:]]
    for text in texts:
        assert text_block_hashes(text, memo=memo) == chained_block_hashes(b"", text, TEXT_BLOCK_CHARS)[0]
    assert len(memo) < sum(len(t) // segment_chars + 1 for t in texts)  # segments were looked up, not all hashed


def test_leading_matches_stop_at_the_first_miss():
    assert leading_matches((1, 2, 3, 4), {1, 2, 4}) == 2
    assert leading_matches((5, 1), {1, 2}) == 0


def test_continuing_a_prompt_into_its_output_equals_hashing_the_whole_sequence():
    prompt = [PromptPart("system", 20), PromptPart("task", 45)]
    output = PromptPart("p/1/m", 40)
    hasher = BlockHasher(16).extend(prompt)
    assert tuple(hasher.copy().extend([output]).hashes) == block_hashes_of([*prompt, output], 16)
    assert tuple(hasher.hashes) == block_hashes_of(prompt, 16)      # the copy left the prompt's alone


def test_token_block_hashes_chain_over_token_ids_and_leave_the_open_tail():
    ids = list(range(40))
    hashes = token_block_hashes(ids, 16)
    assert len(hashes) == 2  # 40 tokens: two full blocks, an open tail of 8
    assert token_block_hashes(ids[:32] + [99] * 8, 16) == hashes  # the tail has no hash
    assert token_block_hashes(ids[:20], 16) == hashes[:1]  # a shared first block, the same hash
    changed = token_block_hashes([7] + ids[1:], 16)
    assert changed[0] != hashes[0] and changed[1] != hashes[1]  # a change early moves every later block
    assert token_block_hashes(ids[:15], 16) == ()
