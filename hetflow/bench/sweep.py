"""A benchmark sweep in the simulator: policies x loads x seeds on one cluster and one workload.

Loads are chosen by the queueing they cause (issue 4): for each target share of workflow time spent
waiting in engine queues under the calibration policy (vLLM-style least load), the arrival rate is
found by bisection on the first seed's trace; every policy and seed then runs at that rate. Or, the
headline: each policy's capacity at SLO on each seed (``hetflow.bench.capacity``), then every policy
at fixed fractions of least load's capacity on that seed. A sweep is described in YAML
(``bench/sweeps/*.yaml``):

    name: hetero-code
    cluster: bench/clusters/hetero-l4.yaml   # a stack config: engines with profiles, router priors
    trace: {family: code, programs: 1500}    # or {path: t.jsonl, format: hetflow|mooncake}
                                             # or {mix: [{family: sql, programs: 500, tenant: gold}, ...]}
    arrival: poisson                         # or gamma (bursty, cv)
    loads: {queueing_share: [0.05, 0.3, 0.6]}   # or {rates: [4, 8]} in programs/s
                                             # or {capacity_fractions: [0.5, 0.8, 0.95]}: capacity at SLO
    capacity: {slo_scale: 5.0, attainment: 0.95, rel_tol: 0.03}   # the capacity rule (these defaults)
    policies: [least-load, chimera, "chimera:latency_slack=1.0",
               {name: my-mix, model: engine-first, engine: scored, engine_params: {scorers: {queue: 1}}}]
    seeds: [1, 2]
    router: learned                          # prior | oracle | learned
    predictor: learned                       # oracle | input-length | learned
    slo_scales: {gold: 2.0, "*": 5.0}        # deadlines by tenant (HexGen-Flow 5.1), optional
    identity: full                           # or session: calls tell program and agent only, their
                                             # stages inferred (an agent framework; needs input-length)
    rivals:                                  # capacity sweeps: each rival's grid of documented settings,
      vllm-router: [vllm-router-program, "vllm-router-program:max_active_programs=256"]
      llm-d: [llm-d]                         # fixed before any run; its best capacity per seed is its figure
    fractions_of: best-rival                 # capacity_fractions of the best rival's capacity on each seed
                                             # (default: least-load's)
    searched: base                           # capacity searched for the base alone, the policies run at
                                             # its fractions (default: all)
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import statistics
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, cast

import yaml

from hetflow.bench.capacity import ABOVE_WORK_CEILING, Capacity, Probe, SloRule, find_capacity
from hetflow.bench.cluster import cluster_from_stack, models_of
from hetflow.bench.common import append_json_line, json_lines
from hetflow.bench.work_ceiling import trace_ceiling
from hetflow.core.engine.profile import EngineSpec
from hetflow.core.presets import Preset, define, full_parameters, resolve
from hetflow.core.trace import StageRecord, programs, read_jsonl
from hetflow.runtime.config import load_stack
from simulator.metrics import GOODPUT_SLO_SCALE, summarize
from simulator.run import ProgramResult, Simulation, reference_latencies
from simulator.settle import StopBelowSlo
from simulator.signals import LearnedSignals, Signals

CALIBRATION_POLICY = "least-load"
CALIBRATION_STEPS = 9
"""Bisection steps on log(rate) per load: the rate is found to within ~2**(-9) of its bracket."""
MAX_RATE_PER_S = 100.0
"""Past this, a finite trace arrives as one burst: a share not reached by then is reported unreachable,
and a capacity search stops here unless the trace's work ceiling lies higher (``capacity_search_top_per_s``)."""


def capacity_search_top_per_s(ceiling_per_s: float) -> float:
    """The highest rate a capacity search probes: ``MAX_RATE_PER_S``, or the work ceiling where that is
    higher (short calls on fast engines, e.g. the code family on the measured-GPU cluster, whose ceiling is
    115-119 programs/s), so that a capacity below the ceiling is measured rather than reported as a lower bound.
    No probe above the ceiling can pass (``ABOVE_WORK_CEILING``), so a sweep fails one without running it."""
    return max(MAX_RATE_PER_S, ceiling_per_s)


LOWEST_SEARCH_START_PER_S = 2.0 ** -8
"""The lowest start that halves as a search from 1 does: ``find_capacity`` runs a failing start's half before
it checks its floor (1e-3/s), and a search from 1 stops after 2**-9."""


def capacity_search_start_per_s(ceiling_per_s: float) -> float:
    """Where a capacity search starts when its sweep names no ``start_rate_per_s``: the highest power of two at
    or below the trace's work ceiling (1 where the ceiling is not a positive number). Doubling or halving from
    any power of two brackets the capacity between the same two powers of two as doubling from 1 (every rate
    below a passing one passes: ``find_capacity``'s assumption), so the capacity is the same and the probes far
    below it, which pass and cost a whole run each, are not run (a capacity under a quarter of the ceiling
    may cost a failing probe or two more from above, which ``--stop-settled`` cuts short)."""
    if not 0.0 < ceiling_per_s < math.inf:
        return 1.0
    return max(2.0 ** (math.frexp(ceiling_per_s)[1] - 1), LOWEST_SEARCH_START_PER_S)  # exact, unlike log2


@dataclass(frozen=True)
class SweepSpec:
    name: str
    cluster: str
    trace: Mapping[str, Any]
    policies: tuple[str, ...]
    seeds: tuple[int, ...] = (1,)
    loads: Mapping[str, tuple[float, ...]] = field(default_factory=lambda: {"queueing_share": (0.05, 0.3, 0.6)})
    arrival: str = "poisson"
    cv: float = 3.0
    router: str = "oracle"
    predictor: str = "oracle"
    slo_scales: Mapping[str, float] = field(default_factory=dict)
    """Tenant -> SLO scale ("*" for all): programs get deadlines (HexGen-Flow 5.1), read by urgency."""
    capacity: Mapping[str, float] = field(default_factory=dict)
    """The capacity rule: slo_scale, attainment, rel_tol, start_rate_per_s (``SloRule`` and
    ``find_capacity`` defaults for any left out; the start by default ``capacity_search_start_per_s``)."""
    identity: str = "full"
    """What calls tell of their place (``Simulation``'s ``identity``): ``full`` or ``session``."""
    rivals: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Rival -> its grid: the policy specs of its documented settings sized for the cluster, fixed before
    any run. Each runs a capacity search; the rival's figure on a seed is its grid's best there."""
    fractions_of: str = "least-load"
    """What ``capacity_fractions`` are fractions of on each seed: ``least-load``'s capacity, or the
    ``best-rival``'s (the highest of every rival's grid)."""
    searched: str = "all"
    """Whose capacity a capacity sweep searches: ``all`` (the policies and every rival's grid) or ``base``
    (only what ``fractions_of`` names), the policies then running at the fractions alone: task score and
    P95 at a common load, a router's frontier."""

    @property
    def capacity_policies(self) -> tuple[str, ...]:
        """Every policy a capacity sweep searches: ``policies``, then each rival's grid, each once (with
        ``searched: base``, least load or the rivals' grids alone)."""
        grids = [p for grid in self.rivals.values() for p in grid]
        if self.searched == "base":
            return (CALIBRATION_POLICY,) if self.fractions_of == "least-load" else tuple(dict.fromkeys(grids))
        return tuple(dict.fromkeys([*self.policies, *grids]))

    @property
    def searched_policies(self) -> tuple[str, ...]:
        """Those of ``policies`` whose capacity is searched."""
        return tuple(p for p in self.policies if p in self.capacity_policies)

    @property
    def slo_rule(self) -> SloRule:
        return SloRule(**{k: v for k, v in self.capacity.items() if k in ("slo_scale", "attainment", "span_latencies")})

    @classmethod
    def from_yaml(cls, path: Path) -> SweepSpec:
        raw = yaml.safe_load(path.read_text())
        raw["policies"] = tuple(p if isinstance(p, str) else define(p, str(path)).name for p in raw["policies"])
        raw["rivals"] = {str(label): tuple(p if isinstance(p, str) else define(p, str(path)).name for p in grid)
                         for label, grid in (raw.get("rivals") or {}).items()}
        raw["seeds"] = tuple(raw.get("seeds", (1,)))
        raw["loads"] = {k: tuple(float(x) for x in v) for k, v in raw.get("loads", {}).items()}
        spec = cls(**raw)
        for p in spec.capacity_policies:
            resolve(p)  # fail before running anything
        if any(not grid for grid in spec.rivals.values()):
            raise ValueError(f"{path}: every rival needs at least one setting in its grid")
        if spec.fractions_of not in ("least-load", "best-rival") or (spec.fractions_of == "best-rival"
                                                                     and not spec.rivals):
            raise ValueError(f"{path}: fractions_of is least-load or best-rival (which needs rivals), "
                             f"got {spec.fractions_of!r}")
        if spec.searched not in ("all", "base"):
            raise ValueError(f"{path}: searched is all or base, got {spec.searched!r}")
        if set(spec.loads) - {"queueing_share", "rates", "capacity_fractions"} or len(spec.loads) != 1:
            raise ValueError(f"{path}: loads must be one of queueing_share, rates or capacity_fractions")
        unknown = set(spec.capacity) - {"slo_scale", "attainment", "span_latencies", "rel_tol", "start_rate_per_s"}
        if unknown:
            raise ValueError(f"{path}: capacity has no setting(s) {sorted(unknown)}")
        spec.slo_rule  # noqa: B018 - fails on a bad rule before anything runs
        return spec


@dataclass(frozen=True)
class RunSpec:
    """One simulation: everything a worker process needs, picklable."""

    policy: str
    seed: int
    rate_per_s: float
    load_label: str
    label: str = ""
    """What its rows are called: the rival whose grid's best on this seed ``policy`` is; "" for ``policy``."""


def load_trace(spec: SweepSpec, seed: int, models: Sequence[str]) -> list[StageRecord]:
    """The sweep's trace at unit rate (1 program/s on average); ``at_rate`` rescales it."""
    trace = spec.trace
    if "path" in trace:
        path = Path(trace["path"])
        if trace.get("format", "hetflow") == "mooncake":
            from hetflow.workloads.mooncake import read_mooncake

            records = read_mooncake(path, models)
        else:
            records = list(read_jsonl(path))
        limit = trace.get("programs")
        groups = list(programs(records).values())[:limit]
        records = [r for g in groups for r in g]
        span = max(g[0].arrival_s for g in groups) or 1.0
        return [replace(r, arrival_s=r.arrival_s * len(groups) / span) for r in records]
    parts = trace["mix"] if "mix" in trace else [trace]
    total = sum(int(p["programs"]) for p in parts)
    records = [r for i, part in enumerate(parts) for r in _generated(part, seed + 1000 * i, models, spec, total)]
    return sorted(records, key=lambda r: (r.arrival_s, r.program_id, r.stage_index))


def servable(records: Sequence[StageRecord], engines: Sequence[EngineSpec]) -> tuple[list[StageRecord], list[str]]:
    """The trace without the programs some call of which no engine could ever hold (its prompt and
    output over an engine's KV capacity or context), whatever the policy; and the dropped programs.
    A property of the workload on this cluster, so no policy is charged with it."""
    def fits(record: StageRecord) -> bool:
        need = max(record.input_tokens[m] + record.output_tokens[m] for m in record.input_tokens)
        return all(need <= min(e.profile.kv_capacity_tokens, e.profile.max_model_len) for e in engines)

    unfit = {r.program_id for r in records if not fits(r)}
    return [r for r in records if r.program_id not in unfit], sorted(unfit)


def _generated(part: Mapping[str, Any], seed: int, models: Sequence[str], spec: SweepSpec,
               total_programs: int) -> list[StageRecord]:
    """One component of a (mixed) trace: its family, for its tenant, at its share of the unit rate."""
    from hetflow.workloads.generate import generate

    n, tenant = int(part["programs"]), part.get("tenant", "default")
    records = generate(part["family"], n, seed, models, arrival=spec.arrival, rate_per_s=n / total_programs,
                       cv=spec.cv, tenant=tenant)
    return records if tenant == "default" else [replace(r, program_id=f"{tenant}/{r.program_id}") for r in records]


def at_rate(records: Sequence[StageRecord], rate_per_s: float) -> list[StageRecord]:
    return [replace(r, arrival_s=r.arrival_s / rate_per_s) for r in records]


def simulate(engines: Sequence[EngineSpec], preset: Preset, records: Sequence[StageRecord], signals: Signals,
             rate_per_s: float, slo_scales: Mapping[str, float] | None = None,
             slo_scale: float = GOODPUT_SLO_SCALE, decode_runs: bool = True,
             isolated_s: Mapping[str, float] | None = None, identity: str = "full",
             stop_below_slo: StopBelowSlo | None = None) -> dict[str, Any]:
    """One run of ``preset``; its summary (``slo_scale``: the X of its within-SLO share), with the
    latencies kept for the CDF plot. ``decode_runs``: the simulator's fast path (simulator.decode_jump;
    False: the reference mode);
    ``isolated_s``: the programs' exclusive latencies when already known (``Sweep.isolated_s``);
    ``identity``: what calls tell of their place (``Simulation``); ``stop_below_slo``: stop once the run
    certainly fails that SLO (``simulator.settle``): a stopped run's summary is then only ``settled`` (where
    it stopped, what it knew) and what no stop can make wrong (the calls lost, the prefix hits so far),
    since a whole run's figures are not known."""
    sim = simulation(engines, preset, signals, slo_scales, decode_runs, identity)
    results = sim.run(at_rate(records, rate_per_s), isolated_s=isolated_s, stop_below_slo=stop_below_slo)
    if sim.settled is not None:
        return {"settled": sim.settled, "finished_programs": len(results), "rejected_calls": len(sim.rejected),
                "prefix_hit_rate_so_far": sim.prefix_hit_rate}
    summary = summarize(results, sim.decision_ms, slo_scale)
    summary["rejected_calls"] = len(sim.rejected)
    summary["prefix_hit_rate"] = sim.prefix_hit_rate
    summary["router_asked_share"] = sim.router_asked_share
    summary["router_changed_share"] = sim.router_changed_share
    summary["busiest_engine_call_share"] = busiest_engine_call_share(results, engines)
    summary["retained_kv_released"] = retained_kv_released(sim)
    summary["latencies_s"] = sorted(round(r.latency_s, 4) for r in results)
    return summary


def simulation(engines: Sequence[EngineSpec], preset: Preset, signals: Signals,
               slo_scales: Mapping[str, float] | None = None, decode_runs: bool = True,
               identity: str = "full") -> Simulation:
    """The simulator set up to run ``preset`` as a sweep runs it."""
    return Simulation.from_preset(engines, preset, signals, slo_scales=slo_scales, decode_runs=decode_runs,
                                  identity=identity)


def retained_kv_released(sim: Simulation) -> dict[str, int]:
    """How the run's KV holds ended, over every engine: by the next call (``resumed``), by time
    (``expired``), to make room (``pressure``)."""
    released = [e.scheduler.retained_released for e in sim.engines.values()]
    return {why: sum(r[why] for r in released) for why in released[0]}


def busiest_engine_call_share(results: Sequence[ProgramResult], engines: Sequence[EngineSpec]) -> float | None:
    """The largest share of the calls any one engine served (1 / engines when even): how far a policy
    herds calls onto some engines while others idle; None without calls."""
    calls = Counter(c.engine_id for r in results for c in r.calls.values())
    total = sum(calls.values())
    return max(calls[e.engine_id] for e in engines) / total if total else None


class Sweep:
    def __init__(self, spec: SweepSpec, learned: Callable[[list[StageRecord], list[str]], LearnedSignals] | None = None,
                 workers: int = 2, decode_runs: bool = True, stop_settled: bool = False) -> None:
        """``stop_settled``: each capacity probe stops once its SLO failure is certain (``simulator.settle``)."""
        self.spec = spec
        self.decode_runs = decode_runs
        self.stop_settled = stop_settled
        raw = load_stack(Path(spec.cluster))
        self.engines = cluster_from_stack(raw)
        self.models = models_of(self.engines)
        self.priors = dict(raw.get("router", {}).get("models", {}))
        self.traces, self.dropped = {}, {}
        for seed in spec.seeds:
            self.traces[seed], self.dropped[seed] = servable(load_trace(spec, seed, self.models), self.engines)
        self.signals = {seed: Signals(spec.router, spec.predictor, self.priors,
                                      learned(self.traces[seed], self.models) if learned else LearnedSignals())
                        for seed in spec.seeds}
        self.workers = workers
        self._isolated_s: dict[int, dict[str, float]] = {}
        self._ceilings: dict[int, dict[str, float]] = {}

    def isolated_s(self, seed: int) -> dict[str, float]:
        """Each program's exclusive latency on this cluster (it does not depend on the rate), computed
        once per seed in each worker process rather than in every probe."""
        if seed not in self._isolated_s:
            self._isolated_s[seed] = reference_latencies(programs(self.traces[seed]).values(), self.engines)
        return self._isolated_s[seed]

    def ceiling(self, seed: int) -> dict[str, float]:
        """The seed's trace's work ceiling on this cluster (``hetflow.bench.work_ceiling.trace_ceiling``), computed
        once per seed in each worker process."""
        if seed not in self._ceilings:
            self._ceilings[seed] = trace_ceiling(self.traces[seed], self.engines)
        return self._ceilings[seed]

    def rates(self, progress: Callable[[str], None] = lambda _: None) -> dict[str, float]:
        """Load label -> programs/s: given, or calibrated to the target queueing shares."""
        if "rates" in self.spec.loads:
            return {f"{r:g}/s": r for r in self.spec.loads["rates"]}
        targets = self.spec.loads["queueing_share"]
        with self._pool() as pool:
            found = list(pool.map(_calibrate_task, targets))
        for target, rate in zip(targets, found):
            progress(f"calibrated: {100 * target:g}% queueing under {CALIBRATION_POLICY} at {rate:.3g} programs/s"
                     if rate else f"unreachable: {100 * target:g}% queueing under {CALIBRATION_POLICY} at any rate "
                                  f"up to {MAX_RATE_PER_S:g} programs/s with this trace; load skipped")
        return {f"queue{100 * t:g}%": r for t, r in zip(targets, found) if r}

    def run(self, rates: Mapping[str, float], progress: Callable[[int, int], None] = lambda done, total: None
            ) -> list[dict[str, Any]]:
        return self.run_all([RunSpec(p, seed, rate, label) for label, rate in rates.items()
                             for p in self.spec.policies for seed in self.spec.seeds], progress)

    def capacities(self, progress: Callable[[int, int], None] = lambda done, total: None,
                   journal: Path | None = None) -> dict[tuple[str, int], Capacity]:
        """Each policy's capacity at SLO on each seed's trace, every rival's grid included, seed by seed (a
        sweep cut short has every policy's figure on its first seeds). ``journal``: each search is appended
        there as it ends, and a search already there for the same rule is taken from it, not run again (a
        sweep resumed after an interruption)."""
        tasks = [(p, seed) for seed in self.spec.seeds for p in self.spec.capacity_policies]
        out = read_journal(journal, self.spec) if journal is not None else {}
        todo = [t for t in tasks if t not in out]
        progress(len(tasks) - len(todo), len(tasks))
        with self._pool() as pool:
            for n, (task, found) in enumerate(zip(todo, pool.map(_capacity_task, todo)), len(tasks) - len(todo) + 1):
                out[task] = found
                if journal is not None:
                    append_journal(journal, self.spec, task, found)
                progress(n, len(tasks))
        return {t: out[t] for t in tasks}

    def fraction_runs(self, capacities: Mapping[tuple[str, int], Capacity]) -> list[RunSpec]:
        """Every policy, and each rival's best setting on the seed, at each fraction of the base capacity on
        the same seed (``fractions_of``: the calibration policy's, or the best rival's); none for a seed
        without a base (a sweep narrowed with ``--policies``)."""
        best = best_of_grids(capacities, self.spec.rivals, self.spec.seeds)
        if self.spec.fractions_of == "best-rival":
            base_name = "the best rival's"
            base = {seed: max(by_seed[seed][1].rate_per_s for by_seed in best.values() if seed in by_seed)
                    for seed in self.spec.seeds if any(seed in by_seed for by_seed in best.values())}
        else:
            base_name = f"{CALIBRATION_POLICY}"
            base = {seed: capacities[(CALIBRATION_POLICY, seed)].rate_per_s for seed in self.spec.seeds
                    if (CALIBRATION_POLICY, seed) in capacities}
        runs = []
        for f in self.spec.loads["capacity_fractions"]:
            label = f"{100 * f:g}% of {base_name} capacity"
            for seed in self.spec.seeds:
                if base.get(seed, 0.0) <= 0:
                    continue
                runs += [RunSpec(p, seed, f * base[seed], label) for p in self.spec.policies]
                runs += [RunSpec(by_seed[seed][0], seed, f * base[seed], label, rival)
                         for rival, by_seed in best.items() if seed in by_seed]
        return runs

    def run_all(self, runs: Sequence[RunSpec], progress: Callable[[int, int], None] = lambda done, total: None
                ) -> list[dict[str, Any]]:
        out = []
        with self._pool() as pool:
            for n, result in enumerate(pool.map(_run_task, runs), 1):
                out.append(result)
                progress(n, len(runs))
        return out

    def _run(self, run: RunSpec) -> dict[str, Any]:
        summary = simulate(self.engines, resolve(run.policy), self.traces[run.seed], self.signals[run.seed],
                           run.rate_per_s, self.spec.slo_scales, self.spec.slo_rule.slo_scale, self.decode_runs,
                           self.isolated_s(run.seed), self.spec.identity)
        return {"policy": run.label or run.policy, "setting": run.policy, "seed": run.seed, "load": run.load_label,
                "rate_per_s": run.rate_per_s, **summary}

    def probe(self, policy: str, seed: int, rate_per_s: float) -> Probe:
        """One capacity probe: ``policy`` on the seed's trace at ``rate_per_s``, judged by the sweep's rule."""
        if rate_per_s > self.ceiling(seed)["ceiling_per_s"]:    # fails by the rule whatever a run would show
            return Probe(rate_per_s, False, {}, (ABOVE_WORK_CEILING,))
        rule = self.spec.slo_rule
        stop = StopBelowSlo(rule.slo_scale, rule.attainment) if self.stop_settled else None
        summary = simulate(self.engines, resolve(policy), self.traces[seed], self.signals[seed], rate_per_s,
                           self.spec.slo_scales, rule.slo_scale, self.decode_runs, self.isolated_s(seed),
                           self.spec.identity, stop)
        failures = rule.failures(summary)
        return Probe(rate_per_s, not failures, {k: v for k, v in summary.items() if k != "latencies_s"}, failures)

    def probe_all(self, tasks: Sequence[tuple[str, int, float]]) -> Iterator[Probe]:
        """``probe`` for each (policy, seed, rate), in the sweep's worker processes, yielded in order."""
        with self._pool() as pool:
            yield from pool.map(_probe_task, tasks)

    def _capacity(self, task: tuple[str, int]) -> Capacity:
        policy, seed = task
        probe = functools.partial(self.probe, policy, seed)
        start = self.spec.capacity["start_rate_per_s"] if "start_rate_per_s" in self.spec.capacity \
            else capacity_search_start_per_s(self.ceiling(seed)["ceiling_per_s"])
        return find_capacity(probe, float(start),
                             float(self.spec.capacity.get("rel_tol", 0.03)),
                             max_rate_per_s=capacity_search_top_per_s(self.ceiling(seed)["ceiling_per_s"]))

    def _calibrate(self, target_share: float) -> float | None:
        """Bisection on log(rate) for the calibration policy's queueing share on the first seed; None
        when no rate up to ``MAX_RATE_PER_S`` reaches it."""
        seed = self.spec.seeds[0]
        preset = resolve(CALIBRATION_POLICY)

        def share(rate: float) -> float:
            return simulate(self.engines, preset, self.traces[seed], self.signals[seed], rate, self.spec.slo_scales,
                            decode_runs=self.decode_runs, isolated_s=self.isolated_s(seed),
                            identity=self.spec.identity)["queueing_share"]

        lo, hi = 0.05, 0.1
        while share(hi) < target_share:
            lo, hi = hi, hi * 2
            if hi > MAX_RATE_PER_S:
                return None
        for _ in range(CALIBRATION_STEPS):
            mid = math.sqrt(lo * hi)
            lo, hi = (mid, hi) if share(mid) < target_share else (lo, mid)
        return math.sqrt(lo * hi)

    def _pool(self) -> Any:
        """Worker processes forked from this one, so they inherit the sweep (traces, signals) as
        ``_ACTIVE`` instead of receiving it pickled with every task."""
        global _ACTIVE
        _ACTIVE = self
        if self.workers <= 1:
            return _InProcess()
        return ProcessPoolExecutor(self.workers, mp_context=get_context("fork"))


_ACTIVE: Sweep | None = None


def rule_key(spec: SweepSpec) -> str:
    """What a capacity search's result depends on besides its policy and seed: the cluster, the trace, the
    signals and the SLO rule (not the policy list, the seeds, the fixed loads or which policies are searched)."""
    fields = {k: v for k, v in spec.__dict__.items() if k not in ("policies", "rivals", "seeds", "loads", "name",
                                                                   "fractions_of", "searched")}
    return json.dumps(fields, sort_keys=True, default=list)


def policy_hash(policy: str) -> str:
    """What the policy named ``policy`` runs today (every stage's plugin and parameters, the engine queue, the
    router's reading, the predictions), hashed: a journal's search is taken only for the same policy, so a
    default that changed is searched again rather than resumed from its old self."""
    preset = resolve(policy)
    described = {"stages": full_parameters(preset), "confidence": preset.confidence, "prediction": preset.prediction}
    return hashlib.sha256(json.dumps(described, sort_keys=True, default=list).encode()).hexdigest()[:12]


def _runs_as_written(line: Mapping[str, Any]) -> bool:
    """Whether a journal line's policy still runs as it did when the line was written."""
    if "policy_hash" not in line:
        return True
    try:
        return bool(line["policy_hash"] == policy_hash(line["policy"]))
    except ValueError:                            # a policy no longer defined
        return False


def append_journal(path: Path, spec: SweepSpec, task: tuple[str, int], found: Capacity) -> None:
    """One line for one finished search: its rule, policy (with ``policy_hash``), seed and every probe."""
    line = {"rule": rule_key(spec), "policy": task[0], "policy_hash": policy_hash(task[0]), "seed": task[1],
            "rate_per_s": found.rate_per_s,
            "failed_above_per_s": found.failed_above_per_s,
            "probes": [{"rate_per_s": p.rate_per_s, "passed": p.passed, "summary": p.summary,
                        "failures": list(p.failures)} for p in found.probes]}
    append_json_line(path, line)


def read_journal(path: Path, spec: SweepSpec) -> dict[tuple[str, int], Capacity]:
    """The searches ``append_journal`` kept for this rule and for each policy as it runs today (a line cut
    off by an interruption is skipped; a line without ``policy_hash``, written before it was kept, is
    taken: the journals' README says which commit wrote each)."""
    rule, out = rule_key(spec), {}
    for line in json_lines(path):
        if line.get("rule") == rule and _runs_as_written(line):
            probes = tuple(Probe(p["rate_per_s"], p["passed"], p["summary"], tuple(p["failures"]))
                           for p in line["probes"])
            out[(line["policy"], int(line["seed"]))] = Capacity(line["rate_per_s"], line["failed_above_per_s"], probes)
    return out


def best_of_grids(capacities: Mapping[tuple[str, int], Capacity], rivals: Mapping[str, Sequence[str]],
                  seeds: Sequence[int]) -> dict[str, dict[int, tuple[str, Capacity]]]:
    """Rival -> seed -> (the setting of its grid with the highest capacity on that seed, that capacity);
    the first setting listed wins a tie. Seeds none of its settings ran on are left out."""
    out: dict[str, dict[int, tuple[str, Capacity]]] = {}
    for rival, grid in rivals.items():
        for seed in seeds:
            ran = [(p, capacities[(p, seed)]) for p in grid if (p, seed) in capacities]
            if ran:
                out.setdefault(rival, {})[seed] = max(ran, key=lambda pc: pc[1].rate_per_s)
    return out


def _run_task(run: RunSpec) -> dict[str, Any]:
    assert _ACTIVE is not None
    return _ACTIVE._run(run)


def _capacity_task(task: tuple[str, int]) -> Capacity:
    assert _ACTIVE is not None
    return _ACTIVE._capacity(task)


def _probe_task(task: tuple[str, int, float]) -> Probe:
    assert _ACTIVE is not None
    return _ACTIVE.probe(*task)


def _calibrate_task(target_share: float) -> float | None:
    assert _ACTIVE is not None
    return _ACTIVE._calibrate(target_share)


class _InProcess:
    def __enter__(self) -> _InProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    @staticmethod
    def map(fn: Callable[[Any], Any], items: Iterable[Any]) -> Iterable[Any]:
        return map(fn, items)


def aggregate(runs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Seed means per (load, policy), with the worst-case stability and the seed count."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["load"], r["policy"]), []).append(r)
    rows = []
    for (load, policy), rs in groups.items():
        scores = [r["task_score"] for r in rs if r["task_score"] is not None]
        rows.append({
            "load": load, "policy": policy, "rate_per_s": rs[0]["rate_per_s"], "seeds": len(rs),
            "latency_per_output_token_ms": statistics.mean(r["latency_per_output_token_ms"] for r in rs),
            "latency_mean_s": statistics.mean(r["latency_s"]["mean"] for r in rs),
            "latency_p95_s": statistics.mean(r["latency_s"]["p95"] for r in rs),
            "task_score": statistics.mean(scores) if scores else None,
            "expected_task_score": _mean_present(r.get("expected_task_score") for r in rs),
            "slo_scale_for_95pct": statistics.mean(r["slo"]["scale_for_95pct"] for r in rs),
            "goodput_programs_per_s": statistics.mean(r["goodput_programs_per_s"] for r in rs),
            "queueing_share": statistics.mean(r["queueing_share"] for r in rs),
            "preemptions": statistics.mean(r["preemptions"] for r in rs),
            "scheduler_overhead_ms": statistics.mean(r["scheduler_overhead_ms"]["mean"] for r in rs),
            "stable": all(r.get("steady_stability", r["stability"])["stable"] for r in rs),
            "router_changed_share": _mean_present(r.get("router_changed_share") for r in rs),
            "prefix_hit_rate": _mean_present(r.get("prefix_hit_rate") for r in rs),
            "busiest_engine_call_share": _mean_present(r.get("busiest_engine_call_share") for r in rs),
            "longest_decile_p95_s": _mean_present(r.get("longest_decile_p95_s") for r in rs),
            "deadline_attainment_by_tenant": _mean_by_tenant(
                [r.get("deadline_attainment_by_tenant") or {} for r in rs]),
        })
    return rows


def _mean_present(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.mean(present) if present else None


def _mean_by_tenant(by_run: Sequence[Mapping[str, float | None]]) -> dict[str, float] | None:
    """Per tenant, the seeds' mean share of programs that met their deadline; None without deadlines."""
    tenants = sorted({t for run in by_run for t, v in run.items() if v is not None})
    return {t: statistics.mean(cast(float, run[t]) for run in by_run if run.get(t) is not None)
            for t in tenants} or None
