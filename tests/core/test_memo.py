import pytest

from hetflow.core.memo import BoundedMemo


def test_a_value_is_computed_once_and_the_oldest_goes_first():
    memo: BoundedMemo[str, int] = BoundedMemo(max_entries=2)
    computed: list[str] = []

    def value(key: str) -> int:
        computed.append(key)
        return len(key)

    assert [memo.get(k, lambda k=k: value(k)) for k in ("a", "bb", "a", "ccc")] == [1, 2, 1, 3]
    assert computed == ["a", "bb", "ccc"] and len(memo) == 2
    memo.get("a", lambda: value("a"))  # "a" was the oldest: computed again
    assert computed[-1] == "a"


def test_a_memo_needs_room():
    with pytest.raises(ValueError):
        BoundedMemo(max_entries=0)
