"""The band below a searched capacity: its fixed grid, the lower envelope, and a run on a tiny sweep."""

from __future__ import annotations

import json

import pytest

from hetflow.bench.capacity import Probe
from hetflow.bench.capacity_band import describe, grid_rates_per_s, lower_envelope_per_s, main
from hetflow.bench.sweep import Sweep, SweepSpec
from tests.hetflow.bench.test_sweep import capacity_file


def test_the_grid_lies_under_the_capacity_in_equal_shares_ascending():
    assert grid_rates_per_s(1.0, 4, 0.01) == pytest.approx([0.96, 0.97, 0.98, 0.99])
    with pytest.raises(ValueError):
        grid_rates_per_s(1.0, 100, 0.01)        # would reach zero
    with pytest.raises(ValueError):
        grid_rates_per_s(0.0, 4, 0.01)


def probes(*marks: tuple[float, bool]) -> list[Probe]:
    return [Probe(rate, passed) for rate, passed in marks]


def test_a_grid_that_passes_keeps_the_searched_capacity():
    assert lower_envelope_per_s(1.0, probes((0.98, True), (0.99, True))) == 1.0


def test_a_failure_under_the_capacity_lowers_it_to_the_last_pass_before_the_first_failure():
    """A pass above a failure does not count: the envelope needs every rate below it to pass."""
    grid = probes((0.98, True), (0.97, False), (0.96, True), (0.99, True))   # in any order
    assert lower_envelope_per_s(1.0, grid) == 0.96


def test_a_grid_whose_lowest_rate_fails_says_the_envelope_lies_below_it():
    assert lower_envelope_per_s(1.0, probes((0.96, False), (0.97, True))) is None


@pytest.mark.slow  # runs whole simulations
def test_the_band_runs_the_sweeps_probe_on_its_grid_and_resumes(tmp_path, capsys):
    path = capacity_file(tmp_path, ["llm-d"], programs=60, rel_tol=0.1)
    spec = SweepSpec.from_yaml(path)
    journal, out = tmp_path / "journal.jsonl", tmp_path / "band.jsonl"
    found = Sweep(spec, workers=1, stop_settled=True).capacities(journal=journal)
    capacity_per_s = found[("llm-d", 1)].rate_per_s
    args = ["--sweep", str(path), "--seeds", "1", "--policies", "llm-d", "--journal", str(journal),
            "--steps", "3", "--step-share", "0.05", "--workers", "1", "-o", str(out)]
    main(args)
    line = json.loads(out.read_text())
    assert [g["rate_per_s"] for g in line["grid"]] == pytest.approx([capacity_per_s * s for s in (0.85, 0.9, 0.95)])
    expected = Sweep(spec, workers=1, stop_settled=True).probe("llm-d", 1, capacity_per_s * 0.9)
    assert line["grid"][1]["passed"] == expected.passed
    assert line["lower_envelope_per_s"] == lower_envelope_per_s(
        capacity_per_s, [Probe(g["rate_per_s"], g["passed"]) for g in line["grid"]])
    assert describe(line) in capsys.readouterr().out
    out.write_text(out.read_text() + '{"policy": "llm-d", "se')   # a line cut off by an interruption
    main(args)                                   # resumed: nothing runs again, nothing appended
    assert len(out.read_text().splitlines()) == 2 and json.loads(out.read_text().splitlines()[0]) == line
    with pytest.raises(SystemExit, match="no search"):           # before any grid runs
        main([*args[:4], "--policies", "llm-d,fcfs", *args[6:]])
    assert len(out.read_text().splitlines()) == 2
