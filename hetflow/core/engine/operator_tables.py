"""Tabulated iteration times composed from measured operator timings (issue 32; docs/profiles.md).

The four-coefficient linear form (``EngineProfile.step_ms``) cannot follow the knee where a small
decode batch turns from memory-bound to compute-bound: against the H100/H200 measurements it misses
by up to 17-27% at some points. For the measured GPUs a profile instead composes an iteration from
per-operator tables, the way the vidur simulator builds its profiles (and as
``gpu-profiles/opprofile.py`` composed them):

    iteration_ms = layers * (gemm(M) + elementwise(M) + sum_chunks attn_prefill(N_i, prefix_i)
                             + attn_decode(B, mean context))
                   + lm_head(B + chunks)

with ``M`` the tokens in the batch (prefill chunk tokens plus one per decoding sequence). Between
measured sizes a table is linear in log(size), as the composition was; below the smallest size it
holds the first value; above the largest it continues its last segment linearly in size (a GEMM
past its knee grows with M, decode attention with the context it reads). A prefill chunk of N new
tokens over a cached prefix of C tokens costs its own causal attention plus the attention of its N
queries over the prefix (linear in their number between the measured chunk sizes): measured where
the vendored data has it (H100, Qwen2.5-7B/14B), else a
roofline term at ``ATTENTION_EFFICIENCY`` of the GPU's tensor throughput, calibrated on that table.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_right
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

import numpy as np

MEASURED_DIR = Path(__file__).resolve().parent / "profiles" / "measured"
ATTENTION_EFFICIENCY = 0.26
"""Share of the GPU's dense BF16 throughput that attention over a cached prefix reaches: the mean over
the H100 prefix table's chunks of 64-2048 tokens over 2k-32k prefixes (Qwen2.5-7B/14B, 0.16-0.33;
``tests/hetflow/core/engine/test_operator_tables.py`` checks it against the table)."""


@dataclass(frozen=True, eq=False)
class Curve:
    """A measured table y(x): linear in log(x) between points (or in x, ``log_x=False``), the first value
    below the grid, the last segment continued linearly in x above it."""

    xs: tuple[float, ...]
    ys: tuple[float, ...]
    log_x: bool = True

    @classmethod
    def of(cls, pairs: Sequence[Sequence[float]], log_x: bool = True) -> Curve:
        ordered = sorted((float(x), float(y)) for x, y in pairs)
        if not ordered:
            raise ValueError("a measured table needs at least one point")
        return cls(tuple(x for x, _ in ordered), tuple(y for _, y in ordered), log_x)

    def at(self, x: float) -> float:
        xs, ys = self.xs, self.ys
        if x <= xs[0]:
            return ys[0]
        if x >= xs[-1]:
            if len(xs) == 1:
                return ys[0]
            slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
            return ys[-1] + slope * (x - xs[-1])
        j = bisect_right(xs, x) - 1
        x0, x1 = xs[j], xs[j + 1]
        t = (math.log(x / x0) / math.log(x1 / x0)) if self.log_x else (x - x0) / (x1 - x0)
        return ys[j] + t * (ys[j + 1] - ys[j])

    def at_many(self, x: np.ndarray) -> np.ndarray:
        """``at`` over an array (decode runs)."""
        xs, ys = np.asarray(self.xs), np.asarray(self.ys)
        inside = np.interp(np.log(np.maximum(x, xs[0])) if self.log_x else x,
                           np.log(xs) if self.log_x else xs, ys)
        if len(xs) == 1:
            return inside
        slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
        return np.where(x > xs[-1], ys[-1] + slope * (x - xs[-1]), inside)


@dataclass(frozen=True, eq=False)
class OperatorTables:
    """One model's measured operators on one GPU (``profiles/measured/<gpu>.json``); times in ms."""

    gpu: str
    model: str
    layers: int
    gemm_per_layer: Curve
    """The layer's four GEMMs (qkv, o, gate_up, down) by tokens in the batch."""
    elementwise_per_layer: Curve
    """Norms, rotary, SiLU-and-mul, residual adds (unfused) by tokens in the batch."""
    lm_head: Curve
    """The logits GEMM by rows (sequences that sample a token)."""
    prefill_attn_per_layer: Curve
    """Causal attention of a chunk of N tokens with no prefix, by N."""
    decode_attn_columns: tuple[tuple[float, Curve], ...]
    """Decode attention: for each measured context length C, a curve over batch size B."""
    prefix_extra_rows: tuple[tuple[float, Curve], ...]
    """Measured attention of a chunk over a cached prefix, less its no-prefix cost: for each chunk size N,
    a curve over the prefix length (linear in C). Empty where not measured."""
    prefix_ms_per_token_pair_per_layer: float
    """The roofline stand-in for ``prefix_extra_rows`` where it is empty."""

    def decode_attn(self, batch: int, mean_context: float) -> float:
        """Per layer: ``batch`` sequences each reading ``mean_context`` tokens of K/V."""
        if batch <= 0:
            return 0.0
        return _decode_curve(self, batch).at(mean_context)

    def prefix_extra(self, new_tokens: int, prefix_tokens: int) -> float:
        """Per layer: the attention of ``new_tokens`` queries over ``prefix_tokens`` cached ones."""
        if prefix_tokens <= 0 or new_tokens <= 0:
            return 0.0
        rows = self.prefix_extra_rows
        if not rows:
            return self.prefix_ms_per_token_pair_per_layer * new_tokens * prefix_tokens
        sizes = [n for n, _ in rows]
        if new_tokens <= sizes[0] or new_tokens >= sizes[-1]:
            n, row = rows[0] if new_tokens <= sizes[0] else rows[-1]
            return row.at(prefix_tokens) * new_tokens / n  # queries over a prefix: linear in their number
        j = bisect_right(sizes, new_tokens) - 1
        (n0, row0), (n1, row1) = rows[j], rows[j + 1]
        t = (new_tokens - n0) / (n1 - n0)  # linear in the number of queries, as outside the rows
        low, high = row0.at(prefix_tokens), row1.at(prefix_tokens)
        return low + t * (high - low)

    def step_ms(self, prefill_chunks: Sequence[tuple[int, int]], decode_seqs: int, decode_context_tokens: int) -> float:
        """GPU time of one iteration: ``prefill_chunks`` as (new tokens, tokens already cached before
        them), ``decode_seqs`` sequences decoding one token each over ``decode_context_tokens`` in all."""
        tokens = decode_seqs + sum(n for n, _ in prefill_chunks)
        if tokens <= 0:
            return 0.0
        per_layer = self.gemm_per_layer.at(tokens) + self.elementwise_per_layer.at(tokens)
        for new, cached in prefill_chunks:
            per_layer += self.prefill_attn_per_layer.at(new) + self.prefix_extra(new, cached)
        if decode_seqs:
            per_layer += self.decode_attn(decode_seqs, decode_context_tokens / decode_seqs)
        return self.layers * per_layer + self.lm_head.at(decode_seqs + len(prefill_chunks))

    def decode_steps_ms(self, batch: int, context_tokens: int, iterations: int) -> np.ndarray:
        """Each of ``iterations`` pure-decode iterations of ``batch`` sequences whose context totals
        ``context_tokens`` at the first and grows by ``batch`` per iteration (``step_ms`` over an array)."""
        fixed = (self.layers * (self.gemm_per_layer.at(batch) + self.elementwise_per_layer.at(batch))
                 + self.lm_head.at(batch))
        mean_context = context_tokens / batch + np.arange(iterations, dtype=float)
        return fixed + self.layers * _decode_curve(self, batch).at_many(mean_context)


@lru_cache(maxsize=4096)
def _decode_curve(tables: OperatorTables, batch: int) -> Curve:
    """Decode attention at ``batch`` over context: each measured column read at ``batch``, then linear in
    log(C) between columns as the composition did."""
    return Curve(tuple(c for c, _ in tables.decode_attn_columns),
                 tuple(column.at(batch) for _, column in tables.decode_attn_columns))


def tables_from_json(gpu: str, model: str, values: dict[str, Any], tensor_tflops: float) -> OperatorTables:
    """``values``: one model of a vendored file (scripts/vendor_gpu_profiles.py writes them)."""
    columns: dict[float, list[tuple[float, float]]] = {}
    for b, c, ms in values["decode_attn_ms_per_layer"] + values.get("long_decode_attn_ms_per_layer", []):
        columns.setdefault(float(c), []).append((b, ms))
    chunks: dict[float, dict[float, float]] = {}
    for n, c, ms in values.get("prefix_attn_ms_per_layer", []):
        chunks.setdefault(float(n), {})[float(c)] = ms
    rows = tuple((n, Curve.of([(c, ms - by_prefix[0.0]) for c, ms in by_prefix.items()], log_x=False))
                 for n, by_prefix in sorted(chunks.items()) if 0.0 in by_prefix)
    pair_flops = 4 * values["heads"] * values["head_dim"]  # QK^T and PV, 2 FLOPs per multiply-add
    return OperatorTables(
        gpu=gpu, model=model, layers=int(values["layers"]),
        gemm_per_layer=Curve.of(values["gemm_ms_per_layer"]),
        elementwise_per_layer=Curve.of(values["elementwise_ms_per_layer"]),
        lm_head=Curve.of(values["lm_head_ms"]),
        prefill_attn_per_layer=Curve.of(values["prefill_attn_ms_per_layer"]),
        decode_attn_columns=tuple((c, Curve.of(points)) for c, points in sorted(columns.items())),
        prefix_extra_rows=rows,
        prefix_ms_per_token_pair_per_layer=pair_flops / (tensor_tflops * 1e12 * ATTENTION_EFFICIENCY) * 1e3,
    )


@lru_cache(maxsize=8)
def measured_file(gpu: str) -> dict[str, Any] | None:
    """The vendored measurements of ``gpu`` (a catalog GPU name), or None when it was not measured."""
    path = MEASURED_DIR / f"{gpu}.json"
    return json.loads(path.read_text()) if path.exists() else None


def measured_models(gpu: str) -> list[str]:
    data = measured_file(gpu)
    return sorted(data["models"]) if data else []
