"""Turn a family's planned programs into trace records: per-model tokens and correctness.

A family plans each program (its stages, their text and dependencies, the item's difficulty and a
length sampler); the builder then, per model, samples output lengths, builds each stage's prompt
(``prompt_parts``), fits the model's ability to its published accuracy over the trace's own items and
draws the final answer's correctness.

A stage's prompt is the conversation so far, as agent frameworks pass it on: every ancestor stage in
order, each as its system prompt, its user prompt and its output, then the stage's own system and
user prompt; a text already in the conversation is not repeated. So a chain's stage starts with its
parent's whole prompt and output, parallel branches share their common ancestors, and the KV blocks
of that shared prefix can be reused (vLLM's automatic prefix caching).
"""

from __future__ import annotations

import functools
import hashlib
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from hetflow.core.memo import BoundedMemo
from hetflow.core.tokens import count_tokens
from hetflow.core.trace import StageRecord, ancestors
from hetflow.workloads.correctness import expected_solve_probability, fit_ability, solve_probability
from hetflow.workloads.models import MODELS

LengthSampler = Callable[[str, random.Random], list[int]]


@dataclass
class StagePlan:
    agent: str
    system_prompt: str
    user_prompt: str
    depends_on: list[int] = field(default_factory=list)
    """1-based stage indices this stage waits for."""
    tool_s: float = 0.0
    """Seconds of tool execution after its dependencies finish and before its call (an agent's tool)."""


@dataclass
class ProgramPlan:
    workflow: str
    variant: str
    stages: list[StagePlan]
    difficulty: float
    """b_i of the item-response model."""
    visible_difficulty: float
    """The part of b_i the prompt's text shows (the family's explained difficulty, as far as the text
    carries it): what a router could learn."""
    hidden_difficulty_sd: float
    """The spread of the rest of b_i around ``visible_difficulty``: what no prompt shows."""
    accuracy_family: str
    """Which published accuracy the models' abilities are fitted to: code, math or general."""
    lengths: LengthSampler
    """(model, rng) -> output tokens of each stage."""
    bonus: float = 0.0
    """Logit bonus of the variant (planning and checking stages)."""
    item: dict[str, Any] = field(default_factory=dict)
    tenant: str = "default"


def build(plans: Sequence[ProgramPlan], models: Sequence[str], arrivals: Sequence[float], seed: int,
          prefix: str = "p") -> list[StageRecord]:
    unknown = sorted(set(models) - set(MODELS))
    if unknown:
        raise ValueError(f"unknown trace model(s) {unknown}; known: {sorted(MODELS)}")
    rng = random.Random(seed)
    abilities = {
        (m, fam): fit_ability(MODELS[m].accuracy[fam], [p.difficulty for p in group], [p.bonus for p in group])
        for fam in {p.accuracy_family for p in plans}
        for group in [[p for p in plans if p.accuracy_family == fam]]
        for m in models
    }
    records: list[StageRecord] = []
    for n, (plan, arrival) in enumerate(zip(plans, arrivals)):
        program_id = f"{prefix}{seed}-{n:06d}"
        outputs = {m: plan.lengths(m, rng) for m in models}
        ability = {m: abilities[(m, plan.accuracy_family)] for m in models}
        probability = {m: solve_probability(ability[m], plan.difficulty, plan.bonus) for m in models}
        visible = {m: expected_solve_probability(ability[m], plan.visible_difficulty, plan.hidden_difficulty_sd,
                                                 plan.bonus) for m in models}
        correct = {m: rng.random() < probability[m] for m in models}
        context = ancestors([stage.depends_on for stage in plan.stages])
        for i, stage in enumerate(plan.stages):
            parts = prompt_parts(plan.stages, i, context[i])
            inputs = {m: sum(p["tokens"] if "text" in p else outputs[m][p["output_of"] - 1] for p in parts)
                      for m in models}
            records.append(StageRecord(
                program_id=program_id, workflow=plan.workflow, variant=plan.variant, stage_index=i + 1,
                stage_count=len(plan.stages), agent=stage.agent,
                upstream_agent=plan.stages[stage.depends_on[-1] - 1].agent if stage.depends_on else "",
                depends_on=list(stage.depends_on), system_prompt=stage.system_prompt, user_prompt=stage.user_prompt,
                input_tokens=inputs,
                output_tokens={m: outputs[m][i] for m in models}, correct=dict(correct),
                solve_probability=dict(probability), visible_solve_probability=dict(visible),
                arrival_s=round(arrival, 6), tenant=plan.tenant, item=dict(plan.item), prompt_parts=parts,
                tool_s=stage.tool_s))
    return records


_TEXT_TOKENS: BoundedMemo[str, int] = BoundedMemo()
"""Token counts of prompt texts by their part key: a program's texts recur in every later stage's prompt."""


def part_key(text: str) -> str:
    """A prompt text's key in ``prompt_parts``: its digest."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def prompt_parts(stages: Sequence[StagePlan], index: int, context: set[int]) -> list[dict[str, Any]]:
    """Stage ``index``'s (0-based) prompt: each ancestor in ``context`` (1-based) as its texts and its
    output, then its own texts, each text once (a text's key is its digest, and its count is taken once
    per key)."""
    parts: list[dict[str, Any]] = []
    seen: set[str] = set()
    for j in [*sorted(context), index + 1]:
        for text in (stages[j - 1].system_prompt, stages[j - 1].user_prompt):
            key = part_key(text)
            if text and key not in seen:
                seen.add(key)
                parts.append({"text": key, "tokens": _TEXT_TOKENS.get(key, functools.partial(count_tokens, text))})
        if j != index + 1:
            parts.append({"output_of": j})
    return parts


def chain(agents: Sequence[tuple[str, str]], user_prompt: str) -> list[StagePlan]:
    """A sequential workflow: each stage depends on the one before."""
    return [StagePlan(agent, system, user_prompt, [i] if i else []) for i, (agent, system) in enumerate(agents)]
