"""The snapshot cost benchmark measures each path on a state of the asked size (figures, not timings, are
checked here: the comparison lives in docs/benchmarks.md)."""

from __future__ import annotations

from hetflow.bench.snapshot_cost import measure


def test_every_path_is_measured_on_a_state_of_the_asked_size():
    row = measure(engines=32, calls_per_engine=2, rounds=5, repeats=1)
    assert row["engines"] == 32
    assert all(row[key] > 0 for key in ("whole_us", "own_part_us", "watch_look_us"))
