"""Plain request traces in the Mooncake format (as aiperf and Mooncake's own traces use): JSON Lines
of ``{"timestamp": ms, "input_length": n, "output_length": n, "hash_ids": [...]}``, one request each.

Each request becomes a one-stage program with the same lengths on every model. ``hash_ids`` name
the prompt's blocks of ``MOONCAKE_BLOCK_TOKENS`` tokens (equal ids, equal prefixes up to that block),
and become the record's prompt parts, so requests that share ids share KV blocks in the engine model's
prefix cache. The format carries no answers, so these programs have no correctness labels and a run
over them reports no task score.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator, Sequence

from hetflow.core.trace import StageRecord

FIELDS = ("timestamp", "input_length", "output_length")
MOONCAKE_BLOCK_TOKENS = 512
"""Tokens per hash id in Mooncake's traces (ai-dynamo/dynamo ``benchmarks/data_generator/README.md``,
"Block Size and Hash IDs": 512 for the Mooncake trace; 6,755 input tokens carry 14 ids)."""


def read_mooncake(path: Path, models: Sequence[str]) -> list[StageRecord]:
    return list(_records(path, models))


def _records(path: Path, models: Sequence[str]) -> Iterator[StageRecord]:
    with path.open() as f:
        rows = [(n, json.loads(line)) for n, line in enumerate(f, 1) if line.strip()]
    if not rows:
        raise ValueError(f"{path}: no requests")
    for n, row in rows:
        missing = [k for k in FIELDS if k not in row]
        if missing:
            raise ValueError(f"{path}:{n}: missing {', '.join(missing)} (Mooncake fields: {', '.join(FIELDS)})")
        if int(row["input_length"]) < 1 or int(row["output_length"]) < 1:
            raise ValueError(f"{path}:{n}: input_length and output_length must be >= 1")
    start_ms = min(float(row["timestamp"]) for _, row in rows)
    for n, row in rows:
        yield StageRecord(
            program_id=f"mooncake-{n}", workflow="mooncake", variant="request", stage_index=1, stage_count=1,
            agent="request", upstream_agent="", depends_on=[], system_prompt="", user_prompt="",
            input_tokens={m: int(row["input_length"]) for m in models},
            output_tokens={m: int(row["output_length"]) for m in models},
            correct={}, arrival_s=(float(row["timestamp"]) - start_ms) / 1e3,
            prompt_parts=_parts(row.get("hash_ids", []), int(row["input_length"]), f"mooncake-{n}"))


def _parts(hash_ids: Sequence[int], input_tokens: int, request: str) -> list[dict[str, Any]]:
    """One part per hash id, the last one cut to the prompt; the tokens past the ids share nothing."""
    parts: list[dict[str, Any]] = []
    left = input_tokens
    for hash_id in hash_ids:
        if left <= 0:
            break
        parts.append({"text": f"mooncake:{hash_id}", "tokens": min(MOONCAKE_BLOCK_TOKENS, left)})
        left -= parts[-1]["tokens"]
    if left > 0:
        parts.append({"text": f"{request}:tail", "tokens": left})
    return parts
