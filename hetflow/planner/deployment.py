"""The deployment solver (Cascadia 3.2): per model type and candidate allocation, the best parallelism
strategy and its latency l_i(f) from the simulator; then a MILP over allocations that minimises the
largest l_i under the GPU budget.

MILP (Cascadia 3.2, "MILP formulation"), with GPU types added: binary x[i,g,f] = 1 when model type i
gets f GPUs of type g;
    minimise   L
    subject to sum_{g,f} x[i,g,f] = 1                  for every model type i     (one allocation each)
               sum_{i,f} f x[i,g,f] <= N_g             for every GPU type g       (the budget; appendix D's <=)
               L >= sum_{g,f} l_i(g,f) x[i,g,f]        for every model type i     (L is the largest latency)
               x[i,g,f] = 0 where f GPUs of type g cannot hold model i, or cannot keep up (l = inf).
A model type that receives no requests takes no GPUs (f = 0, Cascadia 4.3: a plan may deploy a
subset of the cascade). Among allocations with the same L, a tie-break of 1e-6 times the sum of
latencies prefers faster allocations for the model types that are not the bottleneck.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import highspy

from hetflow.core.engine.profile import Architecture, EngineProfile, Gpu
from hetflow.planner.latency import LengthSample, p95_latency_s, p95_s
from hetflow.planner.parallelism import Parallelism, fits, strategies, virtual_engine_profile

TIE_BREAK = 1e-6


@dataclass(frozen=True)
class ModelType:
    """One model type of the cascade and what the planner knows of it."""

    name: str
    arch: Architecture


@dataclass(frozen=True)
class Workload:
    """w_i: the requests one model type receives: their rate and their lengths on it."""

    rate_per_s: float
    lengths: tuple[LengthSample, ...]


@dataclass(frozen=True)
class Allocation:
    """One model type's part of a deployment plan."""

    model: str
    gpu: str
    gpus: int
    parallelism: Parallelism | None
    """None when the model type gets no GPUs (no requests reach it)."""
    p95_s: float


@dataclass
class LatencyTable:
    """l_i(g, f) with the strategy that reaches it, for every f of the budget (Cascadia 3.2: "precomputed
    for all possible resource allocations f to provide latency lookup tables for the MILP").

    Strategies are simulated best bound first: no request is faster in a batch than alone, so the p95
    of the requests' latencies alone on a strategy's engines bounds its simulated p95 from below, and a
    strategy whose bound is no better than a latency already simulated for the same f is skipped
    (branch and bound; the table is the one exhaustive simulation would give)."""

    gpus: Mapping[str, Gpu]
    budget: Mapping[str, int]
    sim_requests: int = 200
    seed: int = 0
    simulations: int = 0
    _sims: dict[tuple[object, ...], float] = field(default_factory=dict)
    _bounds: dict[tuple[object, ...], float] = field(default_factory=dict)

    def column(self, model: ModelType, gpu_name: str, workload: Workload) -> list[tuple[float, Parallelism | None]]:
        """(l_i(g, f), its strategy) for f = 1 .. the budget of ``gpu_name`` (index f - 1); (inf, None)
        where no strategy of f GPUs holds the model or keeps up (Cascadia 3.2, "Parallelism strategy search")."""
        gpu = self.gpus[gpu_name]
        out: list[tuple[float, Parallelism | None]] = []
        for f in range(1, self.budget[gpu_name] + 1):
            held = [s for s in strategies(f) if fits(model.arch, gpu, s.tp, s.pp)]
            best: tuple[float, Parallelism | None] = (math.inf, None)
            for bound, s in sorted((self._bound(model, gpu_name, s.tp, s.pp, workload), s) for s in held):
                if bound >= best[0]:
                    break
                latency = self._simulate(model, gpu_name, s, workload)
                if latency < best[0]:
                    best = (latency, s)
            out.append(best)
        return out

    def _bound(self, model: ModelType, gpu_name: str, tp: int, pp: int, workload: Workload) -> float:
        """p95 of the sampled requests' latencies each alone on a (tp, pp) engine."""
        key = (model.name, gpu_name, tp, pp, workload.lengths)
        if key not in self._bounds:
            profile = self._profile(model, gpu_name, tp, pp)
            self._bounds[key] = p95_s([profile.isolated_request_s(s.input_tokens, s.output_tokens)
                                       for s in workload.lengths])
        return self._bounds[key]

    def _simulate(self, model: ModelType, gpu_name: str, s: Parallelism, workload: Workload) -> float:
        key = (model.name, gpu_name, s, workload)
        if key not in self._sims:
            self.simulations += 1
            self._sims[key] = p95_latency_s(self._profile(model, gpu_name, s.tp, s.pp), s.dp, s.pp, workload.lengths,
                                            workload.rate_per_s, requests=self.sim_requests, seed=self.seed)
        return self._sims[key]

    def _profile(self, model: ModelType, gpu_name: str, tp: int, pp: int) -> EngineProfile:
        return virtual_engine_profile(model.name, gpu_name, model.arch, self.gpus[gpu_name], tp, pp)


class Infeasible(ValueError):
    """No allocation within the budget serves every model type that receives requests."""


Choice = tuple[str, int, float, Parallelism | None]
"""(GPU type, GPUs, l_i, strategy): one allocation a model type may take."""


def solve(models: Sequence[ModelType], workloads: Sequence[Workload],
          table: LatencyTable) -> tuple[float, list[Allocation]]:
    """(L, the allocation per model type) minimising the largest p95 (module docstring's MILP)."""
    options: list[list[Choice]] = []
    for model, workload in zip(models, workloads):
        check_fits(model, table)
        if workload.rate_per_s <= 0:
            options.append([("", 0, 0.0, None)])
            continue
        choices: list[Choice] = []
        for gpu_name in table.budget:
            for f, (latency, strategy) in enumerate(table.column(model, gpu_name, workload), start=1):
                if math.isfinite(latency):
                    choices.append((gpu_name, f, latency, strategy))
        if not choices:
            raise Infeasible(f"{model.name} cannot keep up with {workload.rate_per_s:.3g} requests/s on any "
                             f"allocation of the budget {dict(table.budget)}")
        options.append(choices)
    return _milp(models, options, table.budget)


def check_fits(model: ModelType, table: LatencyTable) -> None:
    """Infeasible, naming the model and the budget, when no allocation holds its weights."""
    for gpu_name, count in table.budget.items():
        if any(fits(model.arch, table.gpus[gpu_name], s.tp, s.pp) for s in strategies(count)):
            return
    raise Infeasible(f"{model.name} ({model.arch.weight_bytes / 2**30:.0f} GiB of weights) fits no allocation of "
                     f"the budget {dict(table.budget)}")


def _milp(models: Sequence[ModelType], options: list[list[Choice]],
          budget: Mapping[str, int]) -> tuple[float, list[Allocation]]:
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    largest = h.addVariable(lb=0.0, name="L")
    x = [[h.addBinary(name=f"x_{i}_{k}") for k in range(len(choices))] for i, choices in enumerate(options)]
    for i, choices in enumerate(options):
        h.addConstr(sum(x[i]) == 1)
        h.addConstr(largest >= sum(lat * x[i][k] for k, (_, _, lat, _) in enumerate(choices)))
    for gpu_name, count in budget.items():
        used = [f * x[i][k] for i, choices in enumerate(options)
                for k, (g, f, _, _) in enumerate(choices) if g == gpu_name]
        if used:
            h.addConstr(sum(used) <= count)
    tie = sum(TIE_BREAK * lat * x[i][k] for i, choices in enumerate(options)
              for k, (_, _, lat, _) in enumerate(choices))
    h.minimize(largest + tie)
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        raise Infeasible(f"no allocation of the budget {dict(budget)} serves every model type at once "
                         f"({len(models)} model types, each needing at least one GPU that holds it)")
    values = h.getSolution().col_value
    allocations = []
    for i, choices in enumerate(options):
        k = max(range(len(choices)), key=lambda k: values[x[i][k].index])
        gpu_name, f, latency, strategy = choices[k]
        allocations.append(Allocation(models[i].name, gpu_name, f, strategy, latency))
    return max(a.p95_s for a in allocations), allocations
