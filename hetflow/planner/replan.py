"""Re-planning on workload shift (Cascadia 4.4): "(i) subsample and record the real-time characteristics of
the incoming LLM workloads, (ii) upon detecting a significant shift in workload characteristics (e.g. an
increase in request arrival rate or request complexity), the scheduling algorithm is executed again".

- ``WorkloadProfile``: rate, mean lengths and the first model type's mean grade (difficulty as the judge
  sees it), of the plan's sample or of a balancer's live window (``Balancer.Workload``).
- ``shift``: the reasons, by ``ShiftRule``, a live profile departs from the planned one.
- ``rollout``: the steps from the running engines to the new plan's, one engine at a time, such that
  GPUs in use never pass the budget and no model the serving cascade routes to is ever left without an
  engine; the cascade itself switches once every model it needs has an engine, and a model it drops
  loses its last engine only after the switch (Cascadia: "requests continue to be processed using the
  current deployment configuration, so there is no service interruption").
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Mapping, Sequence

ADD, REMOVE, SWITCH = "add", "remove", "switch-cascade"


@dataclass(frozen=True)
class WorkloadProfile:
    rate_per_s: float
    mean_input_tokens: float
    mean_output_tokens: float
    """Of the first model type's answers."""
    mean_first_grade: float | None
    samples: int

    @classmethod
    def of(cls, rate_per_s: float, lengths: Sequence[tuple[int, int]],
           first_grades: Sequence[float]) -> WorkloadProfile:
        """From (input, output) token counts and the grades of c_1's answers that have one."""
        return cls(rate_per_s, statistics.mean(i for i, _ in lengths) if lengths else 0.0,
                   statistics.mean(o for _, o in lengths) if lengths else 0.0,
                   statistics.mean(first_grades) if first_grades else None, len(lengths))


@dataclass(frozen=True)
class ShiftRule:
    """What counts as a significant shift (Cascadia 4.4 names rate and complexity; lengths change
    latency as much, 3.1)."""

    rate: float = 0.25
    """Relative change of the arrival rate."""
    lengths: float = 0.25
    """Relative change of the mean input or output length."""
    grade_points: float = 10.0
    """Change of c_1's mean grade on the judge's 0-100 scale."""
    min_samples: int = 20
    """Fewer live samples than this say nothing yet."""


def shift(planned: WorkloadProfile, live: WorkloadProfile, rule: ShiftRule = ShiftRule()) -> list[str]:
    """Why the live workload is not the planned one; empty when it is (or too few samples to tell)."""
    if live.samples < rule.min_samples:
        return []
    reasons = []
    for name, was, now, limit in (("arrival rate", planned.rate_per_s, live.rate_per_s, rule.rate),
                                  ("mean input tokens", planned.mean_input_tokens, live.mean_input_tokens,
                                   rule.lengths),
                                  ("mean output tokens", planned.mean_output_tokens, live.mean_output_tokens,
                                   rule.lengths)):
        if was > 0 and abs(now - was) / was > limit:
            reasons.append(f"{name} {was:.3g} -> {now:.3g} ({(now - was) / was:+.0%}, limit {limit:.0%})")
    if planned.mean_first_grade is not None and live.mean_first_grade is not None \
            and abs(live.mean_first_grade - planned.mean_first_grade) > rule.grade_points:
        reasons.append(f"c_1's mean grade {planned.mean_first_grade:.1f} -> {live.mean_first_grade:.1f} "
                       f"(limit {rule.grade_points:g} points)")
    return reasons


@dataclass(frozen=True)
class Replica:
    """One engine's kind: its model and parallelism."""

    model: str
    tp: int = 1
    pp: int = 1

    @property
    def gpus(self) -> int:
        return self.tp * self.pp


@dataclass(frozen=True)
class Step:
    action: str
    """``add`` or ``remove`` an engine, or ``switch-cascade`` to the new models and thresholds."""
    engine: str = ""
    replica: Replica | None = None
    why: str = ""


@dataclass
class Rollout:
    steps: list[Step] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    """What could not be done without leaving a served model without an engine or passing the budget."""


def rollout(running: Mapping[str, Replica], target: Sequence[Replica], gpu_budget: int,
            old_models: Sequence[str], new_models: Sequence[str]) -> Rollout:
    """Steps from the ``running`` engines (name -> replica) to the ``target`` replicas (module docstring).
    Engines already of a wanted kind stay; the others are removed and the missing kinds added, an add
    whenever its GPUs are free, else a removal that leaves its model an engine (before the switch, the
    old cascade's models must keep one; after it, the new one's)."""
    wanted = Counter(target)
    keep: dict[str, Replica] = {}
    for name, replica in sorted(running.items()):
        if wanted[replica] > 0:
            wanted[replica] -= 1
            keep[name] = replica
    to_add = sorted(wanted.elements(), key=lambda r: (r.model not in _models(running), r.model, -r.gpus))
    to_remove = sorted(n for n in running if n not in keep)
    engines = dict(running)
    out = Rollout()
    served, switched = set(old_models), False
    counter = 0
    while to_add or to_remove or not switched:
        if not switched and all(m in _models(engines) for m in new_models):
            out.steps.append(Step(SWITCH, why=f"every model of the new cascade {list(new_models)} has an engine"))
            served, switched = set(new_models), True
            continue
        free = gpu_budget - sum(r.gpus for r in engines.values())
        add = next((r for r in to_add if r.gpus <= free), None)
        if add is not None:
            to_add.remove(add)
            counter += 1
            while (name := f"{add.model.replace('.', '')}-new{counter}") in running:
                counter += 1
            engines[name] = add
            out.steps.append(Step(ADD, name, add, f"{free} GPUs free"))
            continue
        removable = next((n for n in to_remove if _leaves_an_engine(engines, n, served)), None)
        if removable is None:
            out.blocked += [f"add {r.model} (TP={r.tp}, PP={r.pp}): {r.gpus} GPUs, {free} free" for r in to_add]
            out.blocked += [f"remove {n} ({engines[n].model}): its model's last engine while served"
                            for n in to_remove]
            if not switched:
                out.blocked.append(f"switch the cascade: no engine yet for "
                                   f"{[m for m in new_models if m not in _models(engines)]}")
            return out
        to_remove.remove(removable)
        out.steps.append(Step(REMOVE, removable, engines.pop(removable), "not in the new plan"))
    return out


def _models(engines: Mapping[str, Replica]) -> set[str]:
    return {r.model for r in engines.values()}


def _leaves_an_engine(engines: Mapping[str, Replica], name: str, served: set[str]) -> bool:
    model = engines[name].model
    return model not in served or sum(r.model == model for r in engines.values()) > 1
