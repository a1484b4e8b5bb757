"""Kairos 6: a request's expected KV use per 0.5 s slot, summed per engine, freed on early finish."""

import random

import numpy as np
import pytest

from hetflow.core.monitor.memory_ledger import MemoryLedger, MemoryPlan


def test_plan_grows_linearly_until_its_expected_end():
    plan = MemoryPlan(prompt_tokens=100, decode_tokens_per_s=20.0, expected_s=1.2)
    assert plan.slot_tokens(0.5) == pytest.approx([110.0, 120.0, 124.0])


def test_ledger_sums_requests_and_an_early_finish_frees_the_rest():
    ledger = MemoryLedger(0.5)
    ledger.add("a", MemoryPlan(100, 20.0, 2.0), now_s=10.0)
    ledger.add("b", MemoryPlan(50, 0.0, 1.0), now_s=10.2)
    assert ledger.window(10.0, 5) == pytest.approx([160.0, 170.0, 130.0, 140.0, 0.0])
    ledger.remove("a", now_s=10.6)                       # finished in the second slot, not the fourth
    assert ledger.window(10.6, 4) == pytest.approx([50.0, 0.0, 0.0, 0.0])
    ledger.remove("b", now_s=11.0)
    assert list(ledger.window(11.0, 3)) == [0.0, 0.0, 0.0] and "a" not in ledger


def test_a_clock_stepped_back_frees_what_a_release_frees():
    """The monitor's clock is the wall clock: stepped back between an admit and its release, the release
    still frees the call's slots (they stayed reserved until they slid out, up to the horizon)."""
    ledger = MemoryLedger(0.5)
    ledger.add("a", MemoryPlan(100, 0.0, 2.0), now_s=100.0)
    ledger.add("b", MemoryPlan(50, 0.0, 2.0), now_s=99.0)   # stepped back by a second
    ledger.remove("a", now_s=99.2)
    ledger.remove("b", now_s=99.4)
    assert not ledger.window(100.0, 4).any()


def test_ledger_slides_with_time_and_cuts_plans_at_its_horizon():
    ledger = MemoryLedger(0.5, horizon_slots=4)
    ledger.add("long", MemoryPlan(10, 0.0, 10.0), now_s=0.0)      # 20 slots, kept: 4
    assert list(ledger.window(0.0, 4)) == [10.0] * 4
    assert list(ledger.window(1.0, 4)) == [10.0, 10.0, 0.0, 0.0]  # two slots later
    ledger.remove("long", now_s=1.0)
    assert list(ledger.window(1.0, 4)) == [0.0] * 4


def test_a_call_past_its_planned_end_keeps_its_final_size_until_released():
    ledger = MemoryLedger(0.5)
    ledger.add("slow", MemoryPlan(100, 20.0, 1.0), now_s=0.0)     # planned: 110, 120 over two slots
    assert list(ledger.window(0.0, 3)) == pytest.approx([110.0, 120.0, 0.0])
    assert list(ledger.window(1.0, 3)) == pytest.approx([120.0, 120.0, 0.0])   # overdue: held at 120 for 2 more slots
    ledger.remove("slow", now_s=1.2)
    assert list(ledger.window(1.2, 3)) == [0.0, 0.0, 0.0]


def test_occupied_window_stops_at_the_last_occupied_slot():
    ledger = MemoryLedger(0.5)
    assert len(ledger.occupied_window(0.0, 240)) == 0
    ledger.add("a", MemoryPlan(10, 0.0, 1.0), now_s=0.0)
    assert list(ledger.occupied_window(0.0, 240)) == [10.0, 10.0]


def test_the_occupied_window_is_the_window_without_its_trailing_zeros():
    rng = random.Random(7)
    ledger = MemoryLedger(horizon_slots=64)
    for step in range(200):
        now_s = step * 0.3
        if rng.random() < 0.6:
            ledger.add(f"r{step}", MemoryPlan(rng.randint(1, 500), rng.uniform(0, 50), rng.uniform(0.1, 20)), now_s)
        else:
            ledger.remove(f"r{rng.randrange(max(1, step))}", now_s)
        assert list(ledger.occupied_window(now_s, 64)) == list(np.trim_zeros(ledger.window(now_s, 64), "b"))
