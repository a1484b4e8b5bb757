"""Each workflow stage's mean eq. 6 cost, learned from admitted calls, reaches later calls' snapshots."""

import pytest

from hetflow.core.monitor.snapshot import cluster_snapshot
from hetflow.core.monitor.stage_costs import StageCosts
from hetflow.core.monitor.state import EngineStatus, MonitorLimits, MonitorState


def test_the_mean_is_per_stage_over_a_sliding_window():
    costs = StageCosts(window=2)
    for c in (1.0, 2.0, 4.0):
        costs.record("sql", 2, c)
    costs.record("sql", 3, 9.0)
    costs.record("", 3, 100.0)          # no workflow: nothing learned
    costs.record("sql", 0, 100.0)       # no stage: nothing learned
    assert costs.mean_s("sql", 2) == pytest.approx(3.0)
    assert costs.later_stages_s("sql", 1, 4) == pytest.approx((3.0, 9.0, 0.0))


def test_admits_teach_the_snapshot_of_an_earlier_stage():
    state = MonitorState(MonitorLimits())
    state.report(EngineStatus("e0", model="m"), 0.0)
    state.admit("r1", "p1", "m", "e0", 10.0, 0.0, workflow="sql", stage_index=2, mean_cost_s=0.6)
    snap = cluster_snapshot(state, 0.1, "p2", "linker", workflow="sql", stage_index=1, stage_count=3)
    assert snap.remaining_stage_costs_s == pytest.approx((0.6, 0.0))


def test_only_the_most_recently_heard_workflow_stages_are_kept():
    from hetflow.core.monitor.recent import MAX_AGENTS

    costs = StageCosts()
    for stage in range(1, MAX_AGENTS + 11):
        costs.record("w", stage, 1.0)
    assert costs.mean_s("w", 1) == 0.0 and costs.mean_s("w", MAX_AGENTS + 10) == 1.0
    assert len(costs._costs) == len(costs._sums) == MAX_AGENTS
