"""Cascadia's bi-level scheduling loop (Algorithm 1, appendix D): derive each model type's workload and
the system quality from the thresholds, solve the deployment for it, move the thresholds by the
Chebyshev-guided objective, and stop once the best J has not changed for K iterations.

The routing solver's search (Cascadia 3.3 leaves it open: "iteratively searches for the next theta")
is a pattern search over the threshold levels: from the current theta, every threshold moved r and
``wide_step`` * r levels either way; each candidate's L comes from the deployment solver, and the
candidate with the lowest J becomes theta (Algorithm 1 line 7). r is 1 after an improvement and
doubles with each iteration that finds none, so every iteration of the K that end the loop (best J
unchanged, lines 9-10) looks further than the one before instead of repeating it.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field
from typing import Sequence

from hetflow.core.cascade.judge_prompt import JUDGE_PROMPT_TOKENS
from hetflow.planner.deployment import Allocation, Infeasible, LatencyTable, ModelType, Workload, check_fits, solve
from hetflow.planner.latency import LengthSample
from hetflow.planner.routing import (
    SampledRequest,
    chebyshev_objective,
    proportional_start,
    quality,
    reach,
    threshold_levels,
    utopia_nadir,
)


@dataclass(frozen=True)
class JudgeLoad:
    """The LLM judge's calls as load on a model type of the cascade (Cascadia footnote 4: 1-2 tokens)."""

    model: str
    prompt_tokens: int = JUDGE_PROMPT_TOKENS
    output_tokens: int = 2


class PlanError(ValueError):
    """The planning problem cannot be solved as posed; the message names the constraint."""


@dataclass(frozen=True)
class Requirement:
    q_min: float
    """The quality requirement (the judge's scale)."""
    mu: float = 100.0
    """Penalty weight on the normalised quality shortfall (Cascadia 3.3's example uses 100)."""
    stable_iterations: int = 3
    """K: consecutive iterations with the best J unchanged that end the loop."""
    max_iterations: int = 50
    wide_step: int = 4


@dataclass
class Plan:
    thresholds: list[float]
    """h_1 .. h_{C-1}."""
    processed_share: list[float]
    """Share of all requests each model type processes (Cascadia 4.3's "processing ratios")."""
    allocations: list[Allocation]
    p95_s: float
    """L: the largest model type's p95 latency."""
    quality: float
    objective: float
    utopia: float
    nadir: float
    iterations: int
    evaluated: int
    """Routing strategies whose deployment was solved."""
    runtime_s: float
    history: list[float] = field(default_factory=list)
    """Best J after each iteration."""
    q_min: float = 0.0
    """The requirement; J's penalty lets the best plan fall short of it when no routing the budget serves
    reaches it (``meets_q_min``)."""

    @property
    def meets_q_min(self) -> bool:
        return self.quality >= self.q_min


@dataclass
class _Evaluation:
    latency_s: float
    quality: float
    objective: float
    allocations: list[Allocation]


class _Problem:
    """One planning problem: the checks, the threshold levels and J(theta) with the deployment solved
    for it (Algorithm 1 lines 3-5), memoised by theta."""

    def __init__(self, models: Sequence[ModelType], sample: Sequence[SampledRequest], rate_per_s: float,
                 table: LatencyTable, requirement: Requirement, judge: JudgeLoad | None) -> None:
        self.models, self.sample, self.rate_per_s, self.table, self.requirement = (models, sample, rate_per_s, table,
                                                                                   requirement)
        self.names = [m.name for m in models]
        if judge is not None and judge.model not in self.names:
            raise PlanError(f"the judge's model {judge.model!r} is not a model type of the cascade {self.names}")
        self.judge = judge
        _check(self.names, sample, rate_per_s)
        self.utopia, self.nadir = utopia_nadir(sample, self.names)
        if requirement.q_min > self.utopia:
            raise PlanError(f"q_min {requirement.q_min:g} is above the utopia point z1* = {self.utopia:.4g} (every "
                            f"request on {self.names[-1]}): no routing reaches it")
        if self.utopia <= self.nadir:
            raise PlanError(f"the largest model type scores no higher than the smallest on the sample (z1* = "
                            f"{self.utopia:.4g}, z2* = {self.nadir:.4g}): there is no quality to trade for latency")
        _check_fits(models, table)
        self.levels = [threshold_levels(sample, name) for name in self.names[:-1]]
        self.cache: dict[tuple[int, ...], _Evaluation] = {}
        self.failures: list[str] = []

    def thresholds(self, theta: tuple[int, ...]) -> list[float]:
        return [self.levels[i][k] for i, k in enumerate(theta)]

    def evaluate(self, theta: tuple[int, ...]) -> _Evaluation:
        if theta not in self.cache:
            thresholds = self.thresholds(theta)
            workloads = _workloads(self.models, self.sample, self.rate_per_s, thresholds, self.judge)  # line 3
            try:
                latency_s, allocations = solve(self.models, workloads, self.table)  # line 5
            except Infeasible as exc:
                latency_s, allocations = math.inf, []
                self.failures.append(str(exc))
            q = quality(self.sample, self.names, thresholds)
            self.cache[theta] = _Evaluation(latency_s, q, chebyshev_objective(
                latency_s, q, self.requirement.q_min, self.utopia, self.nadir, self.requirement.mu), allocations)
        return self.cache[theta]

    def result(self, best: tuple[int, ...], iterations: int, started: float, history: list[float]) -> Plan:
        chosen = self.evaluate(best)
        if not chosen.allocations:
            raise PlanError(f"no routing has a deployment within the budget: {self.failures[-1]}")
        thresholds = self.thresholds(best)
        reached = reach(self.sample, self.names, thresholds)
        return Plan(thresholds=thresholds, processed_share=[len(r) / len(self.sample) for r in reached],
                    allocations=chosen.allocations, p95_s=chosen.latency_s, quality=chosen.quality,
                    objective=chosen.objective, utopia=self.utopia, nadir=self.nadir, iterations=iterations,
                    evaluated=len(self.cache), runtime_s=time.perf_counter() - started, history=history,
                    q_min=self.requirement.q_min)


def plan(models: Sequence[ModelType], sample: Sequence[SampledRequest], rate_per_s: float, table: LatencyTable,
         requirement: Requirement, judge: JudgeLoad | None = None) -> Plan:
    """Algorithm 1 of Cascadia for a cascade ``models`` (smallest first) serving ``rate_per_s``
    requests per second like ``sample``; ``judge``: the LLM judge's calls run on that model type's
    GPUs (Cascadia's judge is an outside service; hetflow's shares the budget)."""
    started = time.perf_counter()
    problem = _Problem(models, sample, rate_per_s, table, requirement, judge)
    theta = proportional_start(sample, problem.names, problem.levels)  # line 1
    best = theta
    history: list[float] = []
    stable = 0
    iterations = 0
    while iterations < requirement.max_iterations:  # line 2
        iterations += 1
        reach_steps = 2 ** stable  # no better neighbour: look twice as far (module docstring)
        candidates = [theta, *_neighbours(theta, problem.levels, (reach_steps, requirement.wide_step * reach_steps))]
        theta = min(candidates, key=lambda c: (problem.evaluate(c).objective, c))  # line 7
        if problem.evaluate(theta).objective < problem.evaluate(best).objective:
            best, stable = theta, 0
        else:
            stable += 1
        history.append(problem.evaluate(best).objective)
        if stable >= requirement.stable_iterations:  # line 9
            break
    return problem.result(best, iterations, started, history)


def exhaustive(models: Sequence[ModelType], sample: Sequence[SampledRequest], rate_per_s: float,
               table: LatencyTable, requirement: Requirement, judge: JudgeLoad | None = None) -> Plan:
    """The empirical optimum of Cascadia appendix J: every routing of the threshold levels, each with
    its optimal deployment (the MILP over the whole latency table is exact for a routing), the lowest J
    kept. Exponential in the number of thresholds; for measuring the bi-level loop's gap."""
    started = time.perf_counter()
    problem = _Problem(models, sample, rate_per_s, table, requirement, judge)
    best = min(itertools.product(*(range(len(levels)) for levels in problem.levels)),
               key=lambda theta: (problem.evaluate(theta).objective, theta))
    return problem.result(best, 1, started, [problem.evaluate(best).objective])


def _check(names: Sequence[str], sample: Sequence[SampledRequest], rate_per_s: float) -> None:
    if len(names) < 2:
        raise PlanError("a cascade needs at least two model types")
    if not sample:
        raise PlanError("the workload sample is empty: the planner needs requests answered by every model type")
    if not rate_per_s > 0:
        raise PlanError(f"the arrival rate must be positive, got {rate_per_s}")
    for k, r in enumerate(sample):
        missing = [n for n in names if n not in r.score or n not in r.output_tokens or n not in r.input_tokens]
        if missing:
            raise PlanError(f"sampled request {k} has no score or lengths for {', '.join(missing)}")


def _workloads(models: Sequence[ModelType], sample: Sequence[SampledRequest], rate_per_s: float,
               thresholds: Sequence[float], judge: JudgeLoad | None = None) -> list[Workload]:
    """W from (theta, the sample): each model type's share of the rate and its requests' lengths
    (Algorithm 1 line 3, footnote 1); with a ``judge``, its model type also serves a judge call for every
    answer of c_1 .. c_{C-1} (the question, the answer and the scoring prompt in, ``output_tokens`` out)."""
    names = [m.name for m in models]
    reached = reach(sample, names, thresholds)
    lengths = [[LengthSample(sample[k].input_tokens[m], sample[k].output_tokens[m]) for k in ks]
               for m, ks in zip(names, reached)]
    if judge is not None:
        lengths[names.index(judge.model)] += [
            LengthSample(sample[k].input_tokens[m] + sample[k].output_tokens[m] + judge.prompt_tokens,
                         judge.output_tokens) for m, ks in zip(names[:-1], reached[:-1]) for k in ks]
    return [Workload(rate_per_s * len(ls) / len(sample), tuple(ls)) for ls in lengths]


def _neighbours(theta: tuple[int, ...], levels: Sequence[Sequence[float]],
                steps: tuple[int, int]) -> list[tuple[int, ...]]:
    out = []
    for i, k in enumerate(theta):
        for step in (-steps[1], -steps[0], steps[0], steps[1]):
            if 0 <= k + step < len(levels[i]):
                out.append((*theta[:i], k + step, *theta[i + 1:]))
    return out


def _check_fits(models: Sequence[ModelType], table: LatencyTable) -> None:
    """Every model type must fit some allocation: the smallest sees every request, the largest those
    no other accepts."""
    for m in models:
        try:
            check_fits(m, table)
        except Infeasible as exc:
            raise PlanError(str(exc)) from None
