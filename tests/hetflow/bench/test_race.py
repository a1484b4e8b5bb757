"""The live race's search, journal and resume on fake doors, and a live probe against its twin."""

from pathlib import Path

import pytest

from hetflow.bench.capacity import ABOVE_WORK_CEILING, BELOW_SLO
from hetflow.bench.race import (
    HOST_BEHIND,
    LIVE,
    SIM,
    BudgetSpent,
    HostBehind,
    Journal,
    Race,
    RaceSpec,
    bracket_rates,
    failures_of,
    read_rows,
    twin,
    within_one_step,
)

CAPACITY = {"hetflow": 1.3, "router": 1.0}
"""Each fake door passes up to this rate (programs/s), live and simulated alike."""


def _row(passes: bool, p95_s: float = 10.0, **extra: object) -> dict[str, object]:
    return {"programs": 50, "latency_s": {"p50": 5.0, "p95": p95_s}, "arrival_span_s": 100.0,
            "steady_stability": {"stable": True}, "within_slo_share": 1.0 if passes else 0.6,
            "failed_programs": 0, **extra}


class FakeDoors:
    """Rows by the door's fake capacity; ``stop_after`` live probes, it raises (an interruption)."""

    def __init__(self, stop_after: int | None = None, late: bool = False) -> None:
        self.calls: list[tuple[str, str, int, float]] = []
        self.stop_after, self.late = stop_after, late

    def live(self, door: str, seed: int, rate: float) -> dict[str, object]:
        if self.stop_after is not None and sum(c[0] == LIVE for c in self.calls) >= self.stop_after:
            raise KeyboardInterrupt
        self.calls.append((LIVE, door, seed, rate))
        return _row(rate <= CAPACITY[door], host_kept_up=not self.late, late_iteration_share=0.04 if self.late else 0.0)

    def sim(self, door: str, seed: int, rate: float) -> dict[str, object]:
        self.calls.append((SIM, door, seed, rate))
        return _row(rate <= CAPACITY[door], p95_s=10.3)  # 3% over live's: within the race's 5%


def _spec(**changes: object) -> RaceSpec:
    base: dict[str, object] = {"pool": "pool.yaml", "family": "agent", "doors": ("hetflow", "router"),
                               "programs": 50, "start_rate_per_s": 1.0, "rel_tol": 0.1}
    return RaceSpec(**{**base, **changes})  # type: ignore[arg-type]


def test_the_race_searches_each_door_and_probes_the_other_seeds_at_the_twins_capacities(tmp_path: Path) -> None:
    doors = FakeDoors()
    report = Race(_spec(), Journal(tmp_path / "race.jsonl"), doors.live, doors.sim).run()
    for door, capacity in CAPACITY.items():
        found = report["doors"][door]
        assert found["live_capacity_per_s"] <= capacity < found["live_failed_above_per_s"]
        assert found["live_failed_above_per_s"] / found["live_capacity_per_s"] <= 1.1
        assert found["within_one_step"]
        assert all(p["twin"]["agree"] for p in found["probes"])  # every live probe beside its twin
    low, high = report["bracket_rates_per_s"]
    assert low == report["doors"]["router"]["simulated_capacity_per_s"]
    assert high == report["doors"]["hetflow"]["simulated_capacity_per_s"]
    live_seed_1 = [rate for side, door, seed, rate in doors.calls if (side, door, seed) == (LIVE, "router", 1)]
    assert live_seed_1[0] == report["doors"]["router"]["simulated_capacity_per_s"] and len(live_seed_1) == 2
    for seed in (2, 3):
        verdicts = {(p["seed"], p["rate_per_s"]): p["passed"] for p in report["doors"]["router"]["probes"]}
        assert verdicts[(seed, low)] and not verdicts[(seed, high)]


def test_a_rate_above_the_seeds_work_ceiling_fails_without_running_live_or_simulated(tmp_path: Path) -> None:
    """A finite trace above the ceiling shows how long a burst the SLO absorbs (the ShareGPT chains' twins
    passed 2.4 and 2.617/s over a ceiling of 2.206): the race fails it as the sweeps do."""
    doors = FakeDoors()
    ceilings = {1: 1.2, 2: 1.15, 3: 1.2}  # below hetflow's fake capacity, 1.3
    race = Race(_spec(), Journal(tmp_path / "race.jsonl"), doors.live, doors.sim, ceiling_per_s=ceilings.__getitem__)
    report = race.run()
    assert all(rate <= ceilings[seed] for _, _, seed, rate in doors.calls)
    hetflow = report["doors"]["hetflow"]
    assert hetflow["simulated_capacity_per_s"] <= 1.2 < hetflow["live_failed_above_per_s"]
    assert race.probe(LIVE, "hetflow", 2, 1.18).failures == (ABOVE_WORK_CEILING,)
    assert report["work_ceiling_per_s"] == ceilings


def test_an_interrupted_race_resumes_from_its_journal_without_running_a_probe_twice(tmp_path: Path) -> None:
    whole = FakeDoors()
    expected = Race(_spec(), Journal(tmp_path / "whole.jsonl"), whole.live, whole.sim).run()

    path = tmp_path / "race.jsonl"
    first = FakeDoors(stop_after=4)
    with pytest.raises(KeyboardInterrupt):
        Race(_spec(), Journal(path), first.live, first.sim).run()
    second = FakeDoors()
    resumed = Race(_spec(), Journal(path), second.live, second.sim).run()

    ran = first.calls + second.calls
    assert len(ran) == len(set(ran)) == len(whole.calls)
    assert sorted(ran) == sorted(whole.calls)
    assert {d: r["live_capacity_per_s"] for d, r in resumed["doors"].items()} == \
        {d: r["live_capacity_per_s"] for d, r in expected["doors"].items()}

    third = FakeDoors()
    Race(_spec(), Journal(path), third.live, third.sim).run()
    assert third.calls == []  # everything from the journal


def test_a_race_cut_off_between_a_live_probe_and_its_twin_runs_the_twin_alone(tmp_path: Path) -> None:
    path = tmp_path / "race.jsonl"
    first = FakeDoors()
    Race(_spec(), Journal(path), first.live, first.sim).run()
    live_at = next(i for i, (side, *probe) in enumerate(first.calls)
                   if side == LIVE and first.calls[i + 1] == (SIM, *probe))   # a twin run after its live probe
    rows = path.read_text().splitlines()
    path.write_text("".join(line + "\n" for line in rows[:live_at + 1]))   # the live row, not its twin

    second = FakeDoors()
    Race(_spec(), Journal(path), second.live, second.sim).run()
    assert second.calls[0] == first.calls[live_at + 1]   # the twin, not its live probe again
    assert len(first.calls) == live_at + 1 + len(second.calls)


def test_a_row_cut_off_as_it_was_written_runs_its_probe_again(tmp_path: Path) -> None:
    path = tmp_path / "race.jsonl"
    first = FakeDoors(stop_after=2)
    with pytest.raises(KeyboardInterrupt):
        Race(_spec(), Journal(path), first.live, first.sim).run()
    text = path.read_text()
    path.write_text(text[:-40])   # the last row, half written
    second = FakeDoors()
    Race(_spec(), Journal(path), second.live, second.sim).run()
    assert first.calls[-1] == second.calls[0]   # its probe again, first
    assert all(len(line) and line[0] == "{" for line in path.read_text().splitlines())
    assert len(Journal(path).rows) == len(first.calls) + len(second.calls) - 1

    path.write_text('{"side": \n' + path.read_text())
    with pytest.raises(ValueError, match="row 1 is not JSON"):
        Journal(path)


def test_the_race_stops_before_a_live_probe_once_its_budget_is_spent(tmp_path: Path) -> None:
    ticks = iter(range(0, 10**6, 1000))  # each probe takes 1,000 s of the fake clock
    doors = FakeDoors()
    race = Race(_spec(budget_h=0.5), Journal(tmp_path / "race.jsonl"), doors.live, doors.sim,
                clock=lambda: float(next(ticks)))
    with pytest.raises(BudgetSpent):
        race.run()
    live_probes = [c for c in doors.calls if c[0] == LIVE]
    assert len(live_probes) == 2  # 2,000 s spent of 1,800: the third is not started
    assert len(Journal(tmp_path / "race.jsonl").rows) == len(doors.calls)


def test_a_probe_whose_host_fell_behind_is_kept_and_stops_the_race(tmp_path: Path) -> None:
    doors = FakeDoors(late=True)
    with pytest.raises(HostBehind, match="time_scale"):
        Race(_spec(), Journal(tmp_path / "race.jsonl"), doors.live, doors.sim).run()
    (kept,) = [r for r in Journal(tmp_path / "race.jsonl").rows.values() if r["side"] == LIVE]
    assert HOST_BEHIND in failures_of(kept, _spec().rule)


def test_a_failed_program_fails_the_probe_as_a_lost_call() -> None:
    assert failures_of(_row(True, failed_programs=1), _spec().rule) == ("rejected calls",)
    assert failures_of({"door": "x", "error": "RuntimeError: no pool"}, _spec().rule) == ("rejected calls",)


def test_a_live_probe_against_its_twin_by_verdict_and_p95() -> None:
    recorded = _row(True, p95_s=182.5, host_kept_up=True)  # the fields of a live row that the rule reads
    assert twin(recorded, _row(True, p95_s=186.0), _spec().rule) == \
        {"same_verdict": True, "p95_error": pytest.approx(186.0 / 182.5 - 1), "agree": True}
    assert not twin(recorded, _row(True, p95_s=200.0), _spec().rule)["agree"]  # 9.6% off
    assert twin(recorded, _row(False, p95_s=183.0), _spec().rule)["same_verdict"] is False


def test_the_journals_recorded_probes_against_their_twins() -> None:
    """Two probes of the agent race as they ran (docs/vllm-sim.md): hetflow at 0.800/s on seed 2, passed
    live and simulated with the twin's P95 1.3% under live's; the round robin at 0.528/s on seed 1, a
    live probe stopped once its failure settled, beside a twin that failed."""
    rows = {(r["side"], r["door"], r["seed"], r["rate_per_s"]): r
            for r in read_rows(Path("bench/journals/race-agent-vllm-sim-l4x4.jsonl"))}
    rule = _spec().rule
    hetflow = twin(rows[(LIVE, "hetflow", 2, 0.8)], rows[(SIM, "hetflow", 2, 0.8)], rule)
    assert hetflow["agree"] and hetflow["p95_error"] == pytest.approx(189.35 / 191.66 - 1, abs=1e-3)
    (rate,) = {k[3] for k in rows if k[:3] == (LIVE, "client-rr", 1) and abs(k[3] - 0.528) < 5e-4}
    stopped = rows[(LIVE, "client-rr", 1, rate)]
    assert "settled" in stopped and failures_of(stopped, rule) == (BELOW_SLO,)
    assert twin(stopped, rows[(SIM, "client-rr", 1, rate)], rule) == \
        {"same_verdict": True, "p95_error": None, "agree": True}


def test_a_live_probe_stopped_once_its_failure_settled_is_set_beside_its_twin_by_its_verdict() -> None:
    stopped = {"settled": {"stopped_at_s": 60.0, "late_programs": 3, "programs": 50, "within_slo_share_at_most": 0.94},
               "finished_programs": 31, "failed_programs": 0, "host_kept_up": True}
    assert failures_of(stopped, _spec().rule) == (BELOW_SLO,)
    assert twin(stopped, _row(False), _spec().rule) == {"same_verdict": True, "p95_error": None, "agree": True}
    assert twin(stopped, _row(True), _spec().rule)["agree"] is False


def test_two_capacities_within_one_search_step() -> None:
    assert within_one_step(1.0, 1.1, 0.1) and within_one_step(1.1, 1.0, 0.1)
    assert not within_one_step(1.0, 1.25, 0.1)
    assert within_one_step(0.0, 0.0, 0.1) and not within_one_step(0.0, 1.0, 0.1)


def test_the_bracket_is_the_two_leading_doors_simulated_capacities() -> None:
    from hetflow.bench.capacity import Capacity

    caps = {"a": Capacity(1.2, 1.3, ()), "b": Capacity(0.9, 1.0, ()), "c": Capacity(1.0, 1.1, ())}
    assert bracket_rates(caps) == (1.0, 1.2)


def test_a_spec_needs_two_doors(tmp_path: Path) -> None:
    path = tmp_path / "race.yaml"
    path.write_text("pool: p.yaml\nfamily: agent\ndoors: [hetflow]\nprograms: 10\nstart_rate_per_s: 1\n")
    with pytest.raises(ValueError, match="two doors"):
        RaceSpec.load(path)
    path.write_text("pool: p.yaml\nfamily: agent\ndoors: [hetflow, client-rr]\nprograms: 10\nstart_rate_per_s: 1\n")
    assert RaceSpec.load(path).seeds == (1, 2, 3)


def test_a_spec_names_a_predictor_hetflow_serves(tmp_path: Path) -> None:
    path = tmp_path / "race.yaml"
    base = "pool: p.yaml\nfamily: agent\ndoors: [hetflow, client-rr]\nprograms: 10\nstart_rate_per_s: 1\n"
    path.write_text(base + "hetflow_predictor: oracle\n")
    with pytest.raises(ValueError, match="unknown predictor"):
        RaceSpec.load(path)
    path.write_text(base + "hetflow_predictor: qrf\n")
    assert RaceSpec.load(path).hetflow_predictor == "qrf"
    path.write_text(base)
    assert RaceSpec.load(path).hetflow_predictor == "input-length"


def test_the_shipped_specs_load_and_name_doors_with_twins() -> None:
    from hetflow.bench.doors import SIMULATED_AS

    specs = sorted(Path("bench/races").glob("*.yaml"))
    assert specs
    for path in specs:
        spec = RaceSpec.load(path)
        assert set(spec.doors) <= set(SIMULATED_AS) and Path(spec.pool).exists()


def test_a_search_stays_within_its_span_of_the_start(tmp_path: Path) -> None:
    doors = FakeDoors()
    CAPACITY["slow"] = 0.01
    try:
        report = Race(_spec(doors=("slow", "router"), search_span=4.0), Journal(tmp_path / "race.jsonl"),
                      doors.live, doors.sim).run()
    finally:
        del CAPACITY["slow"]
    assert report["doors"]["slow"]["live_capacity_per_s"] == 0.0
    assert min(rate for _, door, _, rate in doors.calls if door == "slow") >= 1.0 / 4


def test_a_journals_row_made_under_another_rule_stops_the_race(tmp_path: Path) -> None:
    """A rule changed after rows were written (more programs a probe) would reuse rows it did not make."""
    path = tmp_path / "race.jsonl"
    doors = FakeDoors()
    Race(_spec(programs=40), Journal(path), doors.live, doors.sim).run()
    with pytest.raises(ValueError, match="another rule"):
        Race(_spec(programs=50), Journal(path), doors.live, doors.sim).run()
    unstamped = tmp_path / "unstamped.jsonl"   # rows written before rows carried their rule are read as before
    unstamped.write_text("".join(line.replace(', "rule": {', ', "was": {') + "\n"
                                 for line in path.read_text().splitlines()))
    again = FakeDoors()
    Race(_spec(programs=50), Journal(unstamped), again.live, again.sim).run()
    assert again.calls == []
