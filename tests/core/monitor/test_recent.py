"""Tables kept to the keys heard from most recently."""

from collections import OrderedDict

from hetflow.core.monitor.recent import recent_entry


def test_a_key_heard_from_again_stays_and_the_least_recent_goes_past_the_bound():
    table: OrderedDict[str, list[int]] = OrderedDict()
    forgotten: list[str] = []
    for key in ("a", "b", "a", "c"):
        recent_entry(table, key, list, 2, forgotten.append).append(1)
    assert list(table) == ["a", "c"] and table["a"] == [1, 1] and forgotten == ["b"]
