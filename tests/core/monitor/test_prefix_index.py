"""The monitor's approximation of each engine's prefix cache."""

import pytest

from hetflow.core.monitor.prefix_index import PrefixIndex
from hetflow.core.monitor.snapshot import cluster_snapshot
from hetflow.core.monitor.state import EngineStatus, MonitorLimits, MonitorState
from tests.factories import profile


def test_sent_blocks_match_until_the_first_unsent_one():
    index = PrefixIndex(capacity_blocks=10)
    index.record((1, 2, 3))
    assert index.matched_blocks((1, 2, 3, 4)) == 3 and index.matched_blocks((9, 2)) == 0


def test_the_least_recently_sent_blocks_are_forgotten_first():
    index = PrefixIndex(capacity_blocks=3)
    index.record((1, 2))
    index.record((3, 1))          # 1 is recent again
    index.record((4,))            # over capacity: 2 goes
    assert len(index) == 3 and index.matched_blocks((1,)) == 1 and index.matched_blocks((2,)) == 0


def test_a_capacity_below_one_block_is_refused():
    with pytest.raises(ValueError):
        PrefixIndex(0)


def test_the_snapshot_shows_what_each_engine_was_sent():
    state = MonitorState(MonitorLimits())
    for engine_id in ("e0", "e1"):
        state.report(EngineStatus(engine_id, model="m", profile=profile(kv_capacity_tokens=4096)), 0.0)
    state.admit("r1", "p1", "m", "e0", 10.0, 0.1, prefix_blocks=(11, 12, 13))
    views = {e.engine_id: e for e in cluster_snapshot(state, 0.2, prefix_blocks=(11, 12, 99)).engines}
    assert (views["e0"].prefix_match_blocks, views["e0"].prefix_index_blocks) == (2, 3)
    assert (views["e1"].prefix_match_blocks, views["e1"].prefix_index_blocks) == (0, 0)
    assert state.engines["e0"].prefix_index.capacity_blocks == 4096 // 16   # the engine's KV blocks
