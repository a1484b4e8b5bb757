"""Engine choice as the Gateway API Inference Extension makes it: filters, then weighted scorers, then
the highest total.

Filters keep the engines a call may go to (``engine-filter`` plugins: the memory packer's room check);
each scorer gives every kept engine a value in [0, 1] (``engine-scorer`` plugins: prefix affinity,
queue, KV utilization, in-flight tokens, HexGen-Flow's eq. 4); the total is the weighted sum, not
divided by the weights (llm-d/llm-d-inference-scheduler ``pkg/epp/scheduling/scheduler_profile.go``),
and the picker takes the highest. The Extension's max-score picker breaks ties at random; here the
tied engines take turns, in id order, so runs repeat. The receipt carries every scorer's value per
engine, the weights and the totals.

Configuration::

    engine: scored
    engine_params:
      filters: [memory-fit, {working-set: {kv_fraction: 0.9}}]
      scorers: {prefix-affinity: 3, in-flight-tokens: 2, workload-balanced: {weight: 1, alpha: 0.2}}
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from hetflow.core import plugins
from hetflow.core.call import LlmCall
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import (
    Choice,
    EngineFilter,
    EnginePicker,
    EngineScorer,
    PolicyStore,
    Prediction,
    healthy_or_unavailable,
)
from hetflow.core.room import WorkingSetRoom
from hetflow.core.snapshot import ClusterSnapshot, EngineView


@plugin("engine-picker", "scored")
class Scored(EnginePicker):
    def __init__(self, scorers: Mapping[str, Any], filters: Sequence[str | Mapping[str, Any]] = ()) -> None:
        """``scorers``: name -> weight, or name -> {weight, and the scorer's own parameters}; ``filters``:
        names, or {name: its parameters}, applied in order."""
        if not scorers:
            raise ValueError("scored needs at least one scorer")
        self.filters: list[EngineFilter] = [_filter(spec) for spec in filters]
        self.scorers: list[tuple[EngineScorer, float]] = [_scorer(name, spec) for name, spec in scorers.items()]
        self.plans_memory = any(f.plans_memory for f in self.filters)
        self.reads_prefix = any(s.reads_prefix for s, _ in self.scorers)
        self.reads_resident = any(f.reads_resident for f in self.filters) or \
            any(s.reads_resident for s, _ in self.scorers)
        alphas = [s.initial_alpha for s, _ in self.scorers if s.initial_alpha is not None]
        self.initial_alpha = alphas[0] if alphas else None

    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, model: str, prediction: Prediction,
             store: PolicyStore) -> Choice:
        engines = healthy_or_unavailable(snapshot, model)
        for engine_filter in self.filters:
            engines = engine_filter.keep(call, engines, snapshot, prediction)
        values = {s.type_name: s.score(call, engines, snapshot, prediction, store) for s, _ in self.scorers}
        totals = {e.engine_id: sum(w * values[s.type_name][e.engine_id] for s, w in self.scorers) for e in engines}
        best = max(totals.values())
        tied = sorted(engine_id for engine_id, total in totals.items() if total >= best - 1e-12)
        chosen = tied[store.next_turn(f"scored:{model}") % len(tied)] if len(tied) > 1 else tied[0]
        rule = "max-score" + "".join(f";{f.type_name}" for f in self.filters)
        return Choice(chosen, rule, scores=totals, params={f"weight:{s.type_name}": w for s, w in self.scorers},
                      scorers=values)


    def admit_room(self, call: LlmCall, engine: EngineView, snapshot: ClusterSnapshot,
                   prediction: Prediction) -> WorkingSetRoom | None:
        rooms = (f.admit_room(call, engine, snapshot, prediction) for f in self.filters)
        return next((room for room in rooms if room is not None), None)


def _filter(spec: str | Mapping[str, Any]) -> EngineFilter:
    if isinstance(spec, str):
        return plugins.build("engine-filter", spec)
    if len(spec) != 1:
        raise ValueError(f"a filter is a name or {{name: parameters}}, got {dict(spec)!r}")
    (name, params), = spec.items()
    return plugins.build("engine-filter", name, dict(params or {}))


def _scorer(name: str, spec: Any) -> tuple[EngineScorer, float]:
    params = dict(spec) if isinstance(spec, Mapping) else {"weight": spec}
    weight = float(params.pop("weight", 1.0))
    if weight < 0:
        raise ValueError(f"scorer {name!r}: weight must be >= 0, got {weight}")
    return plugins.build("engine-scorer", name, params), weight
