"""hetflow's trace format: JSON Lines, one record per LLM call (a stage of a workflow run).

A program's records share ``program_id`` and ``arrival_s``; ``stage_index`` numbers its calls in a
topological order of the workflow's DAG and ``depends_on`` names the stages each call waits for
(empty for the first stage; several entries after a parallel fan-out). Token counts are per model:
a stage's input includes earlier stages' outputs, and those depend on the model that produced them
(with program affinity, one model serves the whole program). ``prompt_parts`` spells out how the
input is built, so that calls sharing a prefix share its KV blocks. ``correct`` is the per-model
correctness of the program's final answer, the same on every record of the program.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Protocol, Sequence, TypeVar

from hetflow.core.prefix import PromptPart


@dataclass
class StageRecord:
    program_id: str
    workflow: str
    """Family: code, math, chat, sql, kairos-qa, kairos-report, kairos-code."""
    variant: str
    """Shape within the family, e.g. plan-code-qa-code."""
    stage_index: int
    """1-based, topological."""
    stage_count: int
    agent: str
    upstream_agent: str
    depends_on: list[int]
    system_prompt: str
    user_prompt: str
    input_tokens: dict[str, int]
    """Full input (system + user + upstream outputs) per model."""
    output_tokens: dict[str, int]
    correct: dict[str, bool]
    arrival_s: float
    tenant: str = "default"
    item: dict[str, Any] = field(default_factory=dict)
    """Where the text came from and the features of its difficulty (module, level, difficulty...)."""
    tool_s: float = 0.0
    """Seconds the program spends in a tool after the stages it depends on finish and before this call
    is made: time with nothing of it in flight, part of its latency but never of a queue."""
    prompt_parts: list[dict[str, Any]] = field(default_factory=list)
    """The prompt in order, for prefix caching: ``{"text": key, "tokens": n}`` for a piece of text
    (a system or user prompt, keyed by its digest; a Mooncake block by its hash id) and
    ``{"output_of": j}`` for stage j's output, whose length depends on the model. The parts' tokens
    sum to ``input_tokens``. Empty: the prompt shares no prefix with any other."""
    solve_probability: dict[str, float] = field(default_factory=dict)
    """Per model, the probability ``correct`` was drawn with (the workload's item-response model):
    the probability oracle's confidence. Empty where the trace has no such model."""
    visible_solve_probability: dict[str, float] = field(default_factory=dict)
    """The same from the part of the item's difficulty its prompt shows, the rest averaged over: the
    ceiling of a router that reads the text."""

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> StageRecord:
        return cls(**values)


def write_jsonl(records: Iterable[StageRecord], path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for record in records:
            f.write(record.to_json() + "\n")
            n += 1
    return n


def read_jsonl(path: Path) -> Iterator[StageRecord]:
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield StageRecord.from_dict(json.loads(line))
                except (TypeError, ValueError) as exc:
                    raise ValueError(f"{path}:{line_no}: not a hetflow trace record: {exc}") from exc


def programs(records: Iterable[StageRecord]) -> dict[str, list[StageRecord]]:
    """Records grouped by program, each group in stage order."""
    out: dict[str, list[StageRecord]] = {}
    for r in records:
        out.setdefault(r.program_id, []).append(r)
    for group in out.values():
        group.sort(key=lambda r: r.stage_index)
    return out


class _OfAProgram(Protocol):
    @property
    def program_id(self) -> str: ...


P = TypeVar("P", bound=_OfAProgram)


def split_by_program(items: Sequence[P], holdout: float, seed: int) -> tuple[list[P], list[P]]:
    """(fitted, held out): ``holdout`` of the programs (at least one), drawn by ``seed``, held out whole, so
    no program's calls are on both sides (they share its question and its difficulty)."""
    program_ids = sorted({item.program_id for item in items})
    random.Random(seed).shuffle(program_ids)
    held = set(program_ids[:max(1, int(len(program_ids) * holdout))])
    return [i for i in items if i.program_id not in held], [i for i in items if i.program_id in held]


def trace_sha256(records: Iterable[StageRecord]) -> str:
    """Hash of a trace's records: what an artifact says it was trained on."""
    digest = hashlib.sha256()
    for r in records:
        digest.update(r.to_json().encode())
    return digest.hexdigest()


def ancestors(depends_on: Sequence[Sequence[int]]) -> list[set[int]]:
    """Per stage (``depends_on`` in stage order, 1-based indices), every stage whose output reaches its
    input: the transitive closure of depends_on."""
    out: list[set[int]] = []
    for deps in depends_on:
        found: set[int] = set()
        for dep in deps:
            found |= {dep} | out[dep - 1]
        out.append(found)
    return out


def agent_calls_again(program: Sequence[StageRecord], record: StageRecord) -> bool:
    """Whether ``record``'s agent has a later call in its program: what vLLM's router is told as
    ``expected_resume`` (docs/vllm-sim.md, the identity mapping)."""
    return any(r.agent == record.agent and r.stage_index > record.stage_index for r in program)


def remaining_output_tokens(program: list[StageRecord], stage_index: int, model: str) -> int:
    """Chimera 3.4: Y_r = sum over j >= i of OutTokens(p, j), for the program served by ``model``."""
    return sum(r.output_tokens[model] for r in program if r.stage_index >= stage_index)


def prompt_parts(program: list[StageRecord], record: StageRecord, producers: Mapping[int, str]) -> list[PromptPart]:
    """``record``'s prompt, each ancestor output as the model that produced it (``producers``: stage ->
    model) wrote it: named by program, stage and model, so calls share its blocks only when they saw
    the same output, and as long as that model's output."""
    outputs = {r.stage_index: r.output_tokens for r in program}
    parts = []
    for part in record.prompt_parts:
        if "output_of" in part:
            stage, model = part["output_of"], producers[part["output_of"]]
            parts.append(PromptPart(f"{record.program_id}/{stage}/{model}", outputs[stage][model]))
        else:
            parts.append(PromptPart(part["text"], part["tokens"]))
    return parts
