"""The work ceiling of a sweep: the highest rate any policy could serve its trace at on its cluster.

Issue 35 asks that a missed capacity target be explained by the probes. This one bounds what is left:
it charges each program only the engine time it cannot avoid, from the engines' own timing profiles
(``EngineProfile.steady_call_ms``), and assumes every engine is busy all the time:

- **prefill**: an ideal, unbounded prefix cache. A call prefills only the prompt parts after the longest
  prefix of parts any earlier call already had (``StageRecord.prompt_parts``: the shared system prompt,
  the program's earlier prompts and outputs); its new tokens still attend to that cached prefix.
  Charged at the profile's prefill coefficients: per token, and per pair with the cached prefix.
- **decode**: each output token in a batch as large as the engine's KV allows at the call's context,
  ``B = min(max_num_seqs, kv_capacity_tokens // (prompt + output))``, so the weight reads are shared
  as widely as memory permits: ``step_ms(0, B, B x context) / B`` per token, at the call's mean context.
- no queueing, no SLO, no tool gap holding KV, no preemption, no idle engine.

Each engine gives one second of work a second, and a call costs on each engine that engine's time for
it (its profile, its model's token counts). The ceiling is the largest rate at which some split of
every call over the engines keeps each engine's work within its time: the fluid relaxation of
scheduling on unrelated machines, a linear program (minimise the busiest engine's work per program,
T; the ceiling is 1 / T). For one model on identical engines it is ``engines / the mean work of a
program``. In a pool of several models the split may put any call on any of them, whatever the task
score: a ceiling on throughput alone. A rate above it cannot be sustained; a finite trace run above it
only shows how long a burst the SLO absorbs. No policy reaches it; how near one comes says how much a
better schedule could still win.

Per sweep and seed: ``python -m hetflow.bench.ceiling`` (``hetflow.bench.ceiling``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from scipy import optimize, sparse

from hetflow.bench.cluster import models_of
from hetflow.core.engine.profile import EngineProfile, EngineSpec
from hetflow.core.trace import StageRecord, programs


@dataclass(frozen=True)
class CallWork:
    """What one call cannot avoid: tokens to prefill past the ideal cache, and to decode."""

    new_tokens: int
    cached_tokens: int
    output_tokens: int


def _part_key(part: dict[str, Any], program_id: str) -> tuple[str, ...]:
    if "output_of" in part:
        return ("output", program_id, str(part["output_of"]))
    return ("text", str(part["text"]))


def ideal_cache_work(records: Sequence[StageRecord], model: str) -> dict[str, list[CallWork]]:
    """Each program's calls against an unbounded prefix cache that has seen every earlier call, in
    arrival order (a program's calls in stage order): the cached prefix is the longest run of leading
    prompt parts some earlier prompt began with. A call without parts shares nothing."""
    seen: set[tuple[tuple[str, ...], ...]] = set()
    work: dict[str, list[CallWork]] = {}
    groups = sorted(programs(records).values(), key=lambda g: (g[0].arrival_s, g[0].program_id))
    for group in groups:
        outputs = {r.stage_index: r.output_tokens[model] for r in group}
        for record in group:
            prompt, output = record.input_tokens[model], record.output_tokens[model]
            cached, hit = 0, True
            prefix: tuple[tuple[str, ...], ...] = ()
            for part in record.prompt_parts:
                prefix = (*prefix, _part_key(part, record.program_id))
                tokens = outputs.get(part["output_of"], 0) if "output_of" in part else int(part["tokens"])
                if hit and prefix in seen:
                    cached += tokens
                else:
                    hit = False
                    seen.add(prefix)
            seen.add((*prefix, ("output", record.program_id, str(record.stage_index))))
            cached = min(cached, prompt)
            work.setdefault(record.program_id, []).append(CallWork(prompt - cached, cached, output))
    return work


def call_engine_ms(profile: EngineProfile, call: CallWork) -> float:
    """The engine time the call cannot avoid on an engine that is never idle (module docstring)."""
    return profile.steady_call_ms(call.new_tokens, call.cached_tokens, call.output_tokens)


Work = dict[str, list[CallWork]]
"""Program -> its calls' work, for one model."""


def ceiling_per_s(work_by_model: dict[str, Work], engines: Sequence[EngineSpec]) -> float:
    """The most programs/s the engines can finish, each busy all the time, the calls split over them as
    best suits (the linear program of the module docstring)."""
    calls = {model: _calls(work) for model, work in work_by_model.items()}
    costs = np.array([[call_engine_ms(e.profile, calls[e.model][k]) for e in engines]
                      for k in range(len(calls[engines[0].model]))])
    return 1e3 / least_busiest_ms(costs / len(work_by_model[engines[0].model]))


def _calls(work: Work) -> list[CallWork]:
    return [call for program_id in sorted(work) for call in work[program_id]]


def least_busiest_ms(costs: np.ndarray) -> float:
    """min T s.t. sum_c x[c, e] costs[c, e] <= T for each engine e, sum_e x[c, e] = 1, x >= 0; the
    variables are x in call-major order (x[c, e] at c * engines + e), then T."""
    calls, engines = costs.shape
    variables = calls * engines
    call_of, engine_of = np.divmod(np.arange(variables), engines)
    load = sparse.hstack([sparse.coo_matrix((costs[call_of, engine_of], (engine_of, np.arange(variables))),
                                            shape=(engines, variables)), -np.ones((engines, 1))])
    split = sparse.coo_matrix((np.ones(variables), (call_of, np.arange(variables))), shape=(calls, variables + 1))
    objective = np.zeros(variables + 1)
    objective[-1] = 1.0
    solved = optimize.linprog(objective, A_ub=load, b_ub=np.zeros(engines), A_eq=split, b_eq=np.ones(calls),
                              bounds=(0, None), method="highs")
    if not solved.success:
        raise RuntimeError(f"the work ceiling's linear program failed: {solved.message}")
    return float(solved.x[-1])


def hit_rate(work: Work) -> float:
    """The ideal cache's share of prompt tokens: the most any engine's prefix cache could hit."""
    cached = sum(c.cached_tokens for calls in work.values() for c in calls)
    total = cached + sum(c.new_tokens for calls in work.values() for c in calls)
    return cached / total if total else 0.0


def trace_ceiling(records: Sequence[StageRecord], engines: Sequence[EngineSpec]) -> dict[str, float]:
    """The trace's ceiling on the engines (programs/s) and its ideal prefix hit rate (first model's tokens)."""
    models = models_of(engines)
    work = {model: ideal_cache_work(records, model) for model in models}
    return {"ceiling_per_s": ceiling_per_s(work, engines), "ideal_hit_rate": hit_rate(work[models[0]])}
