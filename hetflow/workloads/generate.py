"""Generate a trace: a family's programs, their arrivals, and per-model numbers, from one seed."""

from __future__ import annotations

import random
import statistics
from collections import Counter
from pathlib import Path
from typing import Callable, Sequence

from hetflow.core.trace import StageRecord, programs
from hetflow.workloads import arrivals as arrival_laws
from hetflow.workloads.build import ProgramPlan, build
from hetflow.workloads.families import agent, chat, code, kairos, sql
from hetflow.workloads.families import math as math_family
from hetflow.workloads.models import DEFAULT_MODELS

FAMILIES: dict[str, Callable[[int, random.Random], list[ProgramPlan]]] = {
    "code": code.plan, "math": math_family.plan, "chat": chat.plan, "sql": sql.plan,
    "kairos-qa": kairos.plan_qa, "kairos-report": kairos.plan_report, "kairos-code": kairos.plan_code,
    "agent": agent.plan,
}


def generate(family: str, programs_n: int, seed: int, models: Sequence[str] = DEFAULT_MODELS,
             arrival: str = "poisson", rate_per_s: float = 1.0, cv: float = 3.0,
             replay_timestamps: Sequence[float] | None = None, tenant: str = "default") -> list[StageRecord]:
    """``programs_n`` programs of ``family``; the same arguments give the same trace."""
    if family not in FAMILIES:
        raise ValueError(f"unknown family {family!r}; known: {sorted(FAMILIES)}")
    if programs_n < 1:
        raise ValueError("programs must be >= 1")
    rng = random.Random(f"{family}:{seed}")
    plans = FAMILIES[family](programs_n, rng)
    for plan in plans:
        plan.tenant = tenant
    times = {"poisson": lambda: arrival_laws.poisson(programs_n, rate_per_s, rng),
             "gamma": lambda: arrival_laws.gamma(programs_n, rate_per_s, cv, rng),
             "replay": lambda: arrival_laws.replay(replay_timestamps or [], programs_n)}
    if arrival not in times:
        raise ValueError(f"arrival must be one of {sorted(times)}, got {arrival!r}")
    return build(plans, models, times[arrival](), seed, prefix=f"{family}-")


def summary(records: Sequence[StageRecord]) -> str:
    groups = programs(records)
    models = sorted(records[0].output_tokens) if records else []
    lines = [f"{len(groups)} programs, {len(records)} calls; variants: "
             + ", ".join(f"{v} {n}" for v, n in Counter(g[0].variant for g in groups.values()).most_common(8))]
    for m in models:
        totals = [sum(r.output_tokens[m] for r in g) for g in groups.values()]
        accuracy = statistics.mean(g[0].correct[m] for g in groups.values())
        lines.append(f"  {m:<24} output/program mean {statistics.mean(totals):7.0f} "
                     f"std {statistics.pstdev(totals):7.0f}"
                     f"  accuracy {accuracy:.3f}")
    if records:
        span = max(r.arrival_s for r in records)
        lines.append(f"  arrivals over {span:.1f} s ({len(groups) / span if span else float('inf'):.2f} programs/s)")
    return "\n".join(lines)


def write(records: Sequence[StageRecord], out: Path) -> int:
    from hetflow.core.trace import write_jsonl

    return write_jsonl(records, out)
