"""Kairos 4.3 and 5.1: convergence by Wasserstein distance at each doubling, remaining latency per
agent, and the MDS order with the zero-latency anchor."""

import random

import pytest

from hetflow.core.monitor.agent_latency import LatencySamples, anchor_distances_s, remaining_latency_samples
from hetflow.core.monitor.spans import CallSpan


def test_a_stationary_distribution_converges_and_a_drifting_one_does_not():
    rng = random.Random(1)
    steady, drifting = LatencySamples(), LatencySamples()
    for i in range(1024):
        steady.add(rng.lognormvariate(0.0, 0.3))
        drifting.add(rng.lognormvariate(0.0, 0.3) + i / 50)
    assert steady.converged and steady.last_distance_s is not None
    assert not drifting.converged


def test_mode_is_the_most_common_latency():
    s = LatencySamples()
    for x in [1.0] * 50 + [1.05] * 40 + [9.0] * 20:
        s.add(x)
    assert s.mode_s() == pytest.approx(1.0, abs=0.5)


def test_remaining_latency_runs_to_the_end_of_each_run():
    spans = [CallSpan("m1", "A", "", 0, 1), CallSpan("m1", "B", "A", 1, 4), CallSpan("m2", "A", "", 10, 12)]
    assert remaining_latency_samples(spans) == {"A": [4.0, 2.0], "B": [3.0]}


def test_mds_puts_the_clearly_shorter_agent_first():
    rng = random.Random(2)
    remaining = {"judge": [rng.gauss(2, 0.5) for _ in range(200)],
                 "writer": [rng.gauss(10, 1) for _ in range(200)],
                 "planner": [rng.gauss(30, 3) for _ in range(200)]}
    prio = anchor_distances_s(remaining)
    assert sorted(prio, key=prio.get) == ["judge", "writer", "planner"]
    assert anchor_distances_s({}) == {}


def test_past_the_cap_the_newest_samples_replace_the_oldest():
    s = LatencySamples(max_samples=4)
    for x in [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]:
        s.add(x)
    assert sorted(s.samples) == [3.0, 4.0, 5.0, 6.0]


def test_the_wasserstein_distance_is_scipys():
    """numpy's area between the two CDFs, so the monitor and the simulator start without scipy.stats."""
    import numpy as np
    from scipy.stats import wasserstein_distance as scipy_distance

    from hetflow.core.monitor.agent_latency import wasserstein_distance

    rng = np.random.default_rng(3)
    for n, m in ((1, 1), (1, 40), (17, 5), (300, 256)):
        u, v = rng.exponential(2.0, n), rng.gamma(2.0, 1.5, m)
        assert wasserstein_distance(u, v) == pytest.approx(scipy_distance(u, v), rel=1e-12, abs=1e-15)
    assert wasserstein_distance([1.0, 1.0, 3.0], [1.0, 3.0, 1.0]) == 0.0


def test_the_anchor_line_places_the_agents_with_the_most_samples_and_the_latencies_the_newest_agents(
        monkeypatch):
    """A framework that names an agent per thread makes thousands: the line's O(n^2) distances are
    bounded by placing the most sampled ``max_agents``, and the latency samples by forgetting the agent
    heard from least recently."""
    from hetflow.core.monitor import agent_latency
    from hetflow.core.monitor.agent_latency import AgentStats, anchor_distances_s
    from hetflow.core.monitor.spans import CallSpan

    remaining = {"planner": [5.0] * 9, "coder": [2.0] * 8, **{f"thread-{i}": [1.0] for i in range(50)}}
    assert set(anchor_distances_s(remaining, max_agents=3)) == {"planner", "coder", "thread-0"}
    assert len(anchor_distances_s(remaining)) == len(remaining)   # 52 agents: under the default cap

    monkeypatch.setattr(agent_latency, "MAX_AGENTS", 4)
    stats = AgentStats()
    for agent in ("planner", "thread-0", "thread-1", "thread-2", "planner", "thread-3", "thread-4"):
        stats.record(CallSpan("p", agent, "", 0.0, 1.0))
    assert list(stats.latency) == ["thread-2", "planner", "thread-3", "thread-4"]   # planner heard from lately
