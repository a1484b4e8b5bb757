"""The live race at capacity: each door's capacity at SLO on a pool of simulated vLLM servers, live, each
probe beside its simulated twin.

    python -m hetflow.bench.race --spec bench/races/agent-vllm-sim-l4x4.yaml

The rule is the spec's, fixed before any door runs: the pool, the family, the doors, the programs of a
probe, the seeds, the search's start and step, the SLO and the budget of live time. Then:

1. **The twins' searches, seed 1.** Each door's simulator preset (``hetflow.bench.doors.SIMULATED_AS``) runs
   the capacity search of the sweeps (``hetflow.bench.capacity``: the same ``SloRule`` and bisection) on
   the trace the door will replay. They cost no live time, and they fix the two rates of seeds 2 and 3:
   the simulated capacities of the two leading doors, the lower and the higher.
2. **Seed 1, live.** The same search per door, from its twin's capacity one step either way first (two
   probes where the twin is right), each probe a fresh pool, ``hetflow.bench.doors``'s warm-up and
   replay, and its twin at the same rate.
3. **Seeds 2 and 3, live**, each door at the two rates, each beside its twin.

A rate above the seed's trace's work ceiling on the pool fails without running, live or simulated, as in
the sweeps (``hetflow.bench.work_ceiling``): a finite trace that meets the SLO there shows only how long a
burst the SLO absorbs.

With ``stop_settled`` a live probe stops once more programs have missed the SLO for certain than the
rule allows (the simulator's ``--stop-settled``): the verdict the whole probe would give, sooner.

Every probe's row goes to the journal (``race.jsonl``) as it ends. A rerun with the same journal reads
it and runs only what is missing: a search's path is a function of its verdicts, so it retraces its
steps from the journal to where it stopped. A live probe whose host fell behind (more than 1% of the
engines' iterations over 5% late, ``hetflow.bench.doors``) measured the host, not the door: it is kept in
the journal and the race stops there (raise the pool's ``time_scale``). Once the live probes' wall time
reaches the budget the race stops before its next probe; a rerun with a larger budget goes on.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from hetflow.bench.capacity import ABOVE_WORK_CEILING, REJECTED, Capacity, Probe, SloRule, find_capacity

LIVE, SIM = "live", "sim"
HOST_BEHIND = "host behind"
TWIN_P95_TOLERANCE = 0.05
"""A live probe and its twin agree when their verdicts match and their P95s are within 5%."""
RowRunner = Callable[[str, int, float], dict[str, Any]]
"""``(door, seed, rate_per_s)`` to a probe's row: ``hetflow.bench.doors``'s live row or simulated row."""


@dataclass(frozen=True)
class RaceSpec:
    pool: str
    """The stack config of the ``vllm_sim`` servers (``bench/clusters/vllm-sim-*.yaml``)."""
    family: str
    doors: tuple[str, ...]
    programs: int
    """Programs of one probe's trace (``hetflow.workloads.generate``, at the probe's rate)."""
    start_rate_per_s: float
    """Where each search starts, in programs per second of GPU time."""
    rel_tol: float = 0.1
    """The search stops when the rate that failed is within this of the rate that passed: one step."""
    search_span: float = 8.0
    """The search stays within this factor of its start either way (a live probe at a tenth of the
    capacity takes ten times as long): a door below the floor has capacity 0, one above the ceiling that
    lower bound."""
    seeds: tuple[int, ...] = (1, 2, 3)
    slo_scale: float = 5.0
    attainment: float = 0.95
    warmup_programs: int = 120
    budget_h: float = 3.0
    """Wall time of the live probes after which no live probe starts (the one running then ends)."""
    hetflow_predictor: str = "input-length"
    """hetflow's remaining-work predictor, live and in its twin (``hetflow.bench.doors.PREDICTORS``)."""
    stop_settled: bool = False
    """A live probe stops once its SLO failure is certain (``hetflow.bench.doors.stop_when_settled``): the
    same verdict sooner; its row then has no latency percentiles to set beside its twin's."""

    @classmethod
    def load(cls, path: Path) -> RaceSpec:
        raw = yaml.safe_load(path.read_text())
        raw["doors"] = tuple(raw["doors"])
        if "seeds" in raw:
            raw["seeds"] = tuple(raw["seeds"])
        spec = cls(**raw)
        if len(spec.doors) < 2 or not spec.seeds:
            raise ValueError(f"{path}: a race needs two doors or more and a seed")
        from hetflow.bench.doors import check_predictor

        check_predictor(spec.hetflow_predictor)   # before any twin or live probe runs
        return spec

    @property
    def rule(self) -> SloRule:
        return SloRule(self.slo_scale, self.attainment)

    def probe_rule(self) -> dict[str, Any]:
        """What makes a probe's row, stamped on it: a journal's row made under another is not this race's."""
        return {"pool": self.pool, "family": self.family, "programs": self.programs, "slo_scale": self.slo_scale,
                "attainment": self.attainment, "warmup_programs": self.warmup_programs,
                "hetflow_predictor": self.hetflow_predictor}


class BudgetSpent(Exception):
    """The live probes have used the race's budget: a rerun with a larger one goes on from the journal."""


class HostBehind(Exception):
    """A live probe's host fell behind its engines: the race stops rather than quote it."""


def _key(side: str, door: str, seed: int, rate_per_s: float) -> str:
    return f"{side}|{door}|{seed}|{rate_per_s:.9g}"


def read_rows(path: Path) -> list[dict[str, Any]]:
    """A journal's rows. A last line cut off by an interruption is dropped from the file, so that the
    next row starts a line of its own and that probe runs again; a bad line before it is an error."""
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(lines, 1):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if number < len(lines):
                raise ValueError(f"{path}: row {number} is not JSON") from None
            path.write_text("".join(kept + "\n" for kept in lines[:-1]))
    return rows


class Journal:
    """Every probe's row, one JSON line each, appended as it ends; read back on a rerun."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: dict[str, dict[str, Any]] = {}
        for row in read_rows(path) if path.exists() else []:
            self.rows[_key(row["side"], row["door"], row["seed"], row["rate_per_s"])] = row

    def get(self, side: str, door: str, seed: int, rate_per_s: float) -> dict[str, Any] | None:
        return self.rows.get(_key(side, door, seed, rate_per_s))

    def add(self, row: dict[str, Any]) -> None:
        self.rows[_key(row["side"], row["door"], row["seed"], row["rate_per_s"])] = row
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as out:
            out.write(json.dumps(row) + "\n")

    def live_wall_s(self) -> float:
        return sum(r.get("wall_s", 0.0) for r in self.rows.values() if r["side"] == LIVE)


def failures_of(row: Mapping[str, Any], rule: SloRule) -> tuple[str, ...]:
    """The rule's failures of a probe's row, a program that failed counted as a lost call, and a live
    probe whose host fell behind flagged."""
    found = rule.failures(row) if "error" not in row else (REJECTED,)
    if row.get("failed_programs") and REJECTED not in found:
        found = (REJECTED, *found)
    if row.get("host_kept_up") is False:
        found = (*found, HOST_BEHIND)
    return found


def no_ceiling(seed: int) -> float:
    return math.inf


class Race:
    def __init__(self, spec: RaceSpec, journal: Journal, live: RowRunner, sim: RowRunner,
                 clock: Callable[[], float] = time.monotonic,
                 ceiling_per_s: Callable[[int], float] = no_ceiling) -> None:
        """``ceiling_per_s``: a seed's trace's work ceiling on the pool (``hetflow.bench.work_ceiling``)."""
        self.spec, self.journal, self._live, self._sim, self._clock = spec, journal, live, sim, clock
        self._ceiling_per_s = ceiling_per_s

    def probe(self, side: str, door: str, seed: int, rate_per_s: float) -> Probe:
        """The probe's verdict, from the journal when it ran before; a live probe brings its twin. A rate
        above the trace's work ceiling fails without running, as in the sweeps (``hetflow.bench.capacity``):
        a finite trace that meets the SLO there shows only how long a burst the SLO absorbs."""
        if rate_per_s > self._ceiling_per_s(seed):
            return Probe(rate_per_s, False, {}, (ABOVE_WORK_CEILING,))
        row = self.journal.get(side, door, seed, rate_per_s)
        if row is None:
            row = self._run(side, door, seed, rate_per_s)
        elif "rule" in row and row["rule"] != self.spec.probe_rule():   # rows from before the stamp pass
            raise ValueError(f"{self.journal.path}: {side} {door}, seed {seed}, {rate_per_s:.4g}/s was made under "
                             f"another rule ({row['rule']}); start a new journal")
        if side == LIVE and self.journal.get(SIM, door, seed, rate_per_s) is None:
            self._run(SIM, door, seed, rate_per_s)
        found = failures_of(row, self.spec.rule)
        if HOST_BEHIND in found:
            raise HostBehind(f"{door}, seed {seed}, {rate_per_s:.4g}/s: the host fell behind "
                             f"({row.get('late_iteration_share', 0):.1%} of iterations late); raise the "
                             "pool's time_scale and start a new journal")
        return Probe(rate_per_s, not found, row, found)

    def _run(self, side: str, door: str, seed: int, rate_per_s: float) -> dict[str, Any]:
        if side == LIVE and self.journal.live_wall_s() >= 3600 * self.spec.budget_h:
            raise BudgetSpent(f"{self.journal.live_wall_s() / 3600:.2f} h of live probes spent of "
                              f"{self.spec.budget_h:g} h")
        started = self._clock()
        body = (self._live if side == LIVE else self._sim)(door, seed, rate_per_s)
        row = {**body, "side": side, "door": door, "seed": seed, "rate_per_s": rate_per_s,
               "wall_s": self._clock() - started, "rule": self.spec.probe_rule()}
        self.journal.add(row)
        return row

    def search(self, side: str, door: str, seed: int, twin_capacity_per_s: float = 0.0) -> Capacity:
        """The capacity search of the sweeps; a live one starts at its twin's capacity, one step either
        way first (two probes where the twin is right), else at the spec's start, doubling."""
        start = twin_capacity_per_s or self.spec.start_rate_per_s
        return find_capacity(lambda rate: self.probe(side, door, seed, rate), start, self.spec.rel_tol,
                             min_rate_per_s=start / self.spec.search_span,
                             max_rate_per_s=start * self.spec.search_span,
                             first_step=1 + self.spec.rel_tol if twin_capacity_per_s else 2.0)

    def twins(self) -> dict[str, Capacity]:
        """Each door's simulated capacity on the first seed: no live time."""
        return {door: self.search(SIM, door, self.spec.seeds[0]) for door in self.spec.doors}

    def run(self) -> dict[str, Any]:
        """The race in its order (twins' searches, seed 1 live, the other seeds at the two rates) and its
        report; ``BudgetSpent`` or ``HostBehind`` when it stops early (the journal holds what ran)."""
        first, others = self.spec.seeds[0], self.spec.seeds[1:]
        simulated = self.twins()
        rates = bracket_rates(simulated)
        live = {door: self.search(LIVE, door, first, simulated[door].rate_per_s) for door in self.spec.doors}
        for seed in others:
            for door in self.spec.doors:
                for rate in rates:
                    self.probe(LIVE, door, seed, rate)
        ceilings = {seed: self._ceiling_per_s(seed) for seed in self.spec.seeds}
        return report(self.spec, simulated, live, rates, self.journal, ceilings)


def bracket_rates(simulated: Mapping[str, Capacity]) -> tuple[float, ...]:
    """The simulated capacities of the two leading doors, lower first (one rate when they are equal, none
    where no door passed a rate)."""
    leading = sorted(simulated.values(), key=lambda c: -c.rate_per_s)[:2]
    return tuple(sorted({c.rate_per_s for c in leading if c.rate_per_s > 0}))


def twin(live: Mapping[str, Any], sim: Mapping[str, Any], rule: SloRule) -> dict[str, Any]:
    """A live probe against its simulated twin: the verdicts and the P95's error (a live probe stopped
    once its failure was settled has no P95: its verdict alone is compared)."""
    live_p95, sim_p95 = (r.get("latency_s", {}).get("p95") for r in (live, sim))
    error = sim_p95 / live_p95 - 1 if live_p95 and sim_p95 else None
    same = (not failures_of(live, rule)) == (not failures_of(sim, rule))
    p95_agrees = "settled" in live or (error is not None and abs(error) <= TWIN_P95_TOLERANCE)
    return {"same_verdict": same, "p95_error": error, "agree": same and p95_agrees}


def within_one_step(a_per_s: float, b_per_s: float, rel_tol: float) -> bool:
    """Two capacities found by searches of step ``rel_tol`` are within one step of each other."""
    if a_per_s <= 0 or b_per_s <= 0:
        return a_per_s == b_per_s
    return abs(math.log(a_per_s / b_per_s)) <= math.log(1 + rel_tol) + 1e-12


def report(spec: RaceSpec, simulated: Mapping[str, Capacity], live: Mapping[str, Capacity],
           rates: tuple[float, ...], journal: Journal, ceilings_per_s: Mapping[int, float]) -> dict[str, Any]:
    """Per door: its live and simulated capacities (seed 1), their step agreement, each live probe beside
    its twin, and the other seeds' verdicts at the two rates; the host's state over every live probe;
    each seed's work ceiling (None where none was given)."""
    rule = spec.rule
    doors: dict[str, Any] = {}
    for door in spec.doors:
        probes = []
        for row in sorted((r for r in journal.rows.values() if r["side"] == LIVE and r["door"] == door),
                          key=lambda r: (r["seed"], r["rate_per_s"])):
            sim_row = journal.get(SIM, door, row["seed"], row["rate_per_s"])
            probes.append({"seed": row["seed"], "rate_per_s": row["rate_per_s"],
                           "passed": not failures_of(row, rule), "failures": list(failures_of(row, rule)),
                           "p95_s": row.get("latency_s", {}).get("p95"),
                           "within_slo_share": row.get("within_slo_share"),
                           "server_queueing_share": row.get("server_queueing_share"),
                           "client_queueing_share": row.get("client_queueing_share"),
                           "door_wait_s_per_call": row.get("door_wait_s_per_call"),
                           "prefix_hit_rate": row.get("prefix_hit_rate"),
                           "stable": row.get("steady_stability", {}).get("stable"),
                           "late_iteration_share": row.get("late_iteration_share"),
                           "task_score": row.get("task_score"),
                           **({"settled": row["settled"]} if "settled" in row else {}),
                           **({"twin": twin(row, sim_row, rule)} if sim_row is not None else {})})
        doors[door] = {"live_capacity_per_s": live[door].rate_per_s,
                       "live_failed_above_per_s": live[door].failed_above_per_s,
                       "simulated_capacity_per_s": simulated[door].rate_per_s,
                       "within_one_step": within_one_step(live[door].rate_per_s, simulated[door].rate_per_s,
                                                          spec.rel_tol),
                       "probes": probes}
    return {"spec": asdict(spec), "bracket_rates_per_s": list(rates), "doors": doors,
            "work_ceiling_per_s": {seed: c if math.isfinite(c) else None for seed, c in ceilings_per_s.items()},
            "live_hours": journal.live_wall_s() / 3600}


def door_runners(spec: RaceSpec, out: Path) -> tuple[RowRunner, RowRunner, Callable[[int], float]]:
    """The live door and its twin from ``hetflow.bench.doors``, on the spec's pool and family, and each
    seed's work ceiling there (``hetflow.bench.work_ceiling.trace_ceiling``: the trace's programs are the
    same at every rate)."""
    from hetflow.bench import doors
    from hetflow.bench.prompts import PromptText
    from hetflow.bench.work_ceiling import trace_ceiling
    from hetflow.runtime.config import load_stack
    from hetflow.workloads.generate import generate
    from simulator.settle import StopBelowSlo

    pool = load_stack(Path(spec.pool))
    time_scale, engines = doors.pool_engines(pool)
    text = PromptText(pool["vllm_sim"][0].get("tokenizer", ""))
    args = argparse.Namespace(time_scale=time_scale, idle_s=0.0, warmup_programs=spec.warmup_programs,
                              slo_scale=spec.slo_scale, profile=False, predictor=spec.hetflow_predictor)

    def trace(seed: int, rate: float) -> list[Any]:
        return generate(spec.family, spec.programs, seed, [engines[0].model], rate_per_s=rate)

    stop = StopBelowSlo(spec.slo_scale, spec.attainment) if spec.stop_settled else None

    def live(door: str, seed: int, rate: float) -> dict[str, Any]:
        return doors.run_door(door, pool, trace(seed, rate), args, text, engines, out, stop)

    def sim(door: str, seed: int, rate: float) -> dict[str, Any]:
        return doors.simulated_row(door, trace(seed, rate), engines, spec.slo_scale, spec.warmup_programs,
                                   spec.hetflow_predictor, args.time_scale)

    @functools.cache
    def ceiling_per_s(seed: int) -> float:
        return trace_ceiling(trace(seed, spec.start_rate_per_s), engines)["ceiling_per_s"]

    return live, sim, ceiling_per_s


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m hetflow.bench.race", description=__doc__.split("\n\n")[0])
    p.add_argument("--spec", required=True, type=Path, help="the race's rule, fixed before any door runs")
    p.add_argument("--out", type=Path, default=None,
                   help="the journal, report and figure (default: bench_out/race-<spec>)")
    p.add_argument("--twins-only", action="store_true",
                   help="run the twins' searches alone (no live time) and print their capacities and the two rates")
    args = p.parse_args(argv)
    spec = RaceSpec.load(args.spec)
    unknown = [d for d in spec.doors if d not in _simulated_doors()]
    if unknown:
        raise SystemExit(f"doors without a simulated twin: {unknown}")
    from hetflow.bench.common import OUT_DIR, exit_on_sigterm, machine

    exit_on_sigterm()

    out = args.out or OUT_DIR / f"race-{args.spec.stem}"
    journal = Journal(out / "race.jsonl")
    live, sim, ceiling_per_s = door_runners(spec, out)
    race = Race(spec, journal, live, sim, ceiling_per_s=ceiling_per_s)
    if args.twins_only:
        twins = race.twins()
        for door, capacity in twins.items():
            print(f"{door:<26} simulated capacity {capacity.rate_per_s:.4g}/s (failed at "
                  f"{capacity.failed_above_per_s or float('nan'):.4g}/s)")
        rates = ", ".join(f"{r:.4g}" for r in bracket_rates(twins))
        print(f"the other seeds' rates: {rates} /s; journal {journal.path}")
        return 0
    try:
        result = race.run()
    except (BudgetSpent, HostBehind) as stop:
        print(f"race stopped: {stop}; {len(journal.rows)} probes in {journal.path}", file=sys.stderr)
        return 2
    result = {"command": "python -m hetflow.bench.race " + " ".join(sys.argv[1:] if argv is None else argv),
              "machine": machine(), **result}
    (out / "report.json").write_text(json.dumps(result, indent=1))
    print(f"-> {out}/report.json, figure {draw(journal, out, spec)}")
    return 0


def _simulated_doors() -> set[str]:
    from hetflow.bench.doors import SIMULATED_AS

    return set(SIMULATED_AS)


def draw(journal: Journal, out: Path, spec: RaceSpec) -> Path:
    """P95 latency against load, live and simulated per door (every probe of every seed)."""
    from hetflow.bench.plots import latency_against_load

    rule = spec.rule
    probes: dict[str, list[dict[str, Any]]] = {}
    for row in journal.rows.values():
        name = row["door"] if row["side"] == LIVE else f"sim:{row['door']}"
        probes.setdefault(f"{name}@{row['seed']}", []).append({**row, "passed": not failures_of(row, rule)})
    return latency_against_load(probes, out, f"{spec.family} on {Path(spec.pool).stem}")


if __name__ == "__main__":
    raise SystemExit(main())
