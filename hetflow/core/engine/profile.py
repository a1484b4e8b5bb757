"""Engine timing profiles: how long one continuous-batching iteration takes, and KV capacity.

Iteration time follows the load-balancer paper (section 3, figure 4): batch time grows linearly
with the prefill tokens in the batch (slope grad_1) and slowly with the tokens already in decode
(slope grad_2). We split the decode term in two, a per-sequence compute cost and a per-context-token
KV read, and add a fixed cost for reading the weights once per iteration:

    step_ms = iteration_overhead_ms + decode_base_ms + prefill_ms_per_token * prefill_tokens
              + prefill_ms_per_context_pair * sum over prefill chunks (new tokens x tokens cached before them)
              + decode_ms_per_seq * decode_seqs + decode_ms_per_batch_token * decode_context_tokens

The pair term is the chunk's attention over a cached prefix (or its earlier chunks), which prefix
caching does not skip (issue 32). Built-in profiles are derived from the architecture and the GPU by a
roofline estimate (``derive``; docs/profiles.md), or, for the GPUs measured operator by operator
(``profiles/measured/``), composed from those tables (``operator_tables``); measured ones are written
by ``hetflow profile`` as plain YAML.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import yaml

from hetflow.core.engine.operator_tables import (
    ATTENTION_EFFICIENCY,
    OperatorTables,
    measured_file,
    measured_models,
    tables_from_json,
)

CATALOG_PATH = Path(__file__).resolve().parent / "profiles" / "catalog.yaml"
GIB = 1024**3

# Roofline efficiencies: the share of datasheet bandwidth and compute an iteration's terms reach,
# fitted to the H100's measured operator tables and checked on the H200's (hetflow.bench.roofline_check).
# Before: 0.7 of bandwidth and 0.5 of throughput for every term (datasheet rules of thumb).
HBM_EFFICIENCY = 0.92         # weight reads, once per iteration: the H100's measured read-only copy
LAYER_LATENCY_MS = 0.052      # each layer's kernels: a latency floor however small the batch
KV_READ_EFFICIENCY = 0.803    # each decoding sequence's KV reads
COMPUTE_EFFICIENCY = 0.677    # a prefill token's GEMMs and elementwise work, 2 FLOPs per parameter
# A decoding sequence's marginal cost as 2 FLOPs per parameter at this share of peak. Above 1: below the
# knee (small batches) a decode batch's GEMMs hide behind the weight reads, so the fitted marginal cost
# is half what full-rate compute would charge.
DECODE_SEQ_EFFICIENCY = 2.003
ITERATION_OVERHEAD_MS = 1.5   # the engine's own scheduling + sampling + launch per iteration (CUDA graphs on)
GPU_MEMORY_UTILIZATION = 0.9  # vLLM's default share of GPU memory it may use
ACTIVATION_RESERVE_GIB = 1.5  # activations / CUDA graphs kept out of the KV pool
REPRESENTATIVE_CONTEXT = 1024 # context length used to quote decode_ms_per_token


@dataclass(frozen=True)
class EngineProfile:
    """Everything the engine model and the balancer need to know about one engine's speed."""

    name: str
    """Profile id, ``<model>@<gpu>`` for derived profiles."""
    model: str
    gpu: str
    prefill_ms_per_token: float
    """grad_1: added batch time per prefill token."""
    decode_base_ms: float
    """GPU time of an iteration at an empty batch: the weight reads (profiles written before
    ``iteration_overhead_ms`` existed fold the engine's overhead in here)."""
    decode_ms_per_seq: float
    """Added iteration time per decoding sequence (its share of compute)."""
    decode_ms_per_batch_token: float
    """grad_2: added iteration time per context token of decoding sequences (KV reads)."""
    kv_capacity_tokens: int
    """Tokens of KV cache the engine holds: (GPU memory x utilisation - weights - reserve) / KV bytes per token."""
    block_size: int = 16
    """Tokens per paged KV block."""
    max_num_seqs: int = 256
    """Most sequences in one batch (vLLM's max_num_seqs): Pi[m].max_batch_size."""
    max_num_batched_tokens: int = 8192
    """Token budget of one iteration (chunked prefill)."""
    max_model_len: int = 32768
    """Longest prompt + output a request may have."""
    source: str = "roofline"
    """How the numbers were obtained: "roofline" estimate, "measured" by hetflow profile, or
    "measured-operators" (composed from ``profiles/measured/``)."""
    iteration_overhead_ms: float = 0.0
    """The engine's own time per iteration beside the GPU's (scheduling, sampling, launch).
    ``ITERATION_OVERHEAD_MS`` for built-in profiles; 0 for profiles that fold it into decode_base_ms."""
    prefill_ms_per_context_pair: float = 0.0
    """Attention of a prefill token over one token cached before its chunk (a prefix-cache hit or an
    earlier chunk): per (new token, cached token) pair. 0 for profiles that predate it."""
    operator_tables: OperatorTables | None = dataclasses.field(default=None, repr=False)
    """Measured operator tables; when set they time an iteration instead of the linear coefficients,
    which stay the engine's reported estimate (their least-squares fit to the tables)."""

    @property
    def num_kv_blocks(self) -> int:
        return self.kv_capacity_tokens // self.block_size

    @property
    def decode_ms_per_token(self) -> float:
        """Pi[m].decode_ms_per_token (Chimera 3.6): iteration time of a full batch at a representative context."""
        return self.step_ms(prefill_tokens=0, decode_seqs=self.max_num_seqs,
                            decode_context_tokens=self.max_num_seqs * REPRESENTATIVE_CONTEXT)

    def step_ms(self, prefill_tokens: int, decode_seqs: int, decode_context_tokens: int,
                prefill_chunks: Sequence[tuple[int, int]] | None = None) -> float:
        """Iteration time of one batch (load-balancer paper, section 3, split as in the module docstring).
        ``prefill_chunks``: each prefill chunk's (new tokens, tokens cached before them); by default one
        chunk of ``prefill_tokens`` with nothing cached."""
        if prefill_chunks is None:
            prefill_chunks = ((prefill_tokens, 0),) if prefill_tokens else ()
        if self.operator_tables is not None:
            return self.iteration_overhead_ms + self.operator_tables.step_ms(
                prefill_chunks, decode_seqs, decode_context_tokens)
        return (self.iteration_overhead_ms + self.decode_base_ms
                + self.prefill_ms_per_token * prefill_tokens
                + self.prefill_ms_per_context_pair * sum(new * cached for new, cached in prefill_chunks)
                + self.decode_ms_per_seq * decode_seqs
                + self.decode_ms_per_batch_token * decode_context_tokens)

    def decode_run_ms(self, batch: int, context_tokens: int, iterations: int) -> np.ndarray:
        """When each of ``iterations`` pure-decode iterations ends, in ms from the first's start: ``batch``
        sequences whose context totals ``context_tokens`` at the first, growing by ``batch`` per
        iteration. Entry ``k`` is the sum of the first ``k`` step times (entry 0 is 0)."""
        done = np.arange(iterations + 1, dtype=float)
        if self.operator_tables is None:  # the linear form: an arithmetic series
            first_ms = self.step_ms(0, batch, context_tokens)
            return done * first_ms + self.decode_ms_per_batch_token * batch * done * (done - 1) / 2
        steps = self.operator_tables.decode_steps_ms(batch, context_tokens, iterations)
        return np.concatenate(([0.0], np.cumsum(steps + self.iteration_overhead_ms)))

    def isolated_request_s(self, prompt_tokens: int, output_tokens: int, cached_tokens: int = 0) -> float:
        """Latency of one request alone on this engine: the prefill iteration(s) of the prompt tokens not
        in the prefix cache, which yield the first token, then one decode iteration per further token
        over a growing context (the sum of ``step_ms``, in closed form for the linear profile). The
        reference for SLO scales (HexGen-Flow 5.1)."""
        new_tokens = max(1, prompt_tokens - cached_tokens)
        decodes = max(0, output_tokens - 1)
        if self.operator_tables is not None:
            return _tabulated_isolated_request_s(self, prompt_tokens, new_tokens, decodes)
        chunks = -(-new_tokens // self.max_num_batched_tokens)
        pairs = _chunked_pairs(new_tokens, prompt_tokens - new_tokens, self.max_num_batched_tokens)
        prefill_ms = (chunks * (self.iteration_overhead_ms + self.decode_base_ms)
                      + self.prefill_ms_per_token * new_tokens + self.prefill_ms_per_context_pair * pairs)
        context_sum = decodes * prompt_tokens + decodes * (decodes - 1) / 2  # decode k reads P + k - 1 tokens
        decode_ms = (decodes * (self.iteration_overhead_ms + self.decode_base_ms + self.decode_ms_per_seq)
                     + self.decode_ms_per_batch_token * context_sum)
        return (prefill_ms + decode_ms) / 1e3

    def steady_call_ms(self, new_tokens: float, cached_tokens: float, output_tokens: float) -> float:
        """The engine time a call costs an engine that is never idle (a fluid bound): its output tokens
        decoded in a batch as large as ``max_num_seqs`` and the KV allow at its full context, each paying
        its share of the batch's iteration at its mean context; its new prompt tokens at the prefill
        coefficients, per token and per pair with the ``cached_tokens`` before them. Cascadia's planner
        bounds a replica's rate with it (``hetflow.planner.latency``), the work ceiling a cluster's
        (``hetflow.bench.work_ceiling``)."""
        full_context = new_tokens + cached_tokens + output_tokens
        batch = max(1, min(self.max_num_seqs, int(self.kv_capacity_tokens // max(1.0, full_context))))
        decode_step_ms = self.step_ms(0, batch, int(batch * (new_tokens + cached_tokens + output_tokens / 2)))
        prefill_ms = (self.prefill_ms_per_token * new_tokens
                      + self.prefill_ms_per_context_pair * new_tokens * cached_tokens)
        return prefill_ms + output_tokens * decode_step_ms / batch

    def as_reported(self) -> EngineProfile:
        """The profile as an engine reports it to the monitor (``hetflow.wire.profile_to_proto``): the
        four coefficients alone, the overhead folded into ``decode_base_ms``, no pair term or tables.
        The simulator's engines report this too, so its balancer decides on what a live one sees."""
        return dataclasses.replace(self, decode_base_ms=self.decode_base_ms + self.iteration_overhead_ms,
                                   iteration_overhead_ms=0.0, prefill_ms_per_context_pair=0.0, operator_tables=None)

    def slowed(self, factor: float) -> EngineProfile:
        """This profile as reported (``as_reported``) on a GPU ``factor`` times slower: each of the four
        coefficients times ``factor``. An engine in front of a simulated server at ``time_scale`` reports
        it, so that the balancer's estimates are in the seconds its own clock reads."""
        if factor <= 0:
            raise ValueError(f"a profile is slowed by a factor > 0, got {factor}")
        reported = self.as_reported()
        return dataclasses.replace(reported, prefill_ms_per_token=reported.prefill_ms_per_token * factor,
                                   decode_base_ms=reported.decode_base_ms * factor,
                                   decode_ms_per_seq=reported.decode_ms_per_seq * factor,
                                   decode_ms_per_batch_token=reported.decode_ms_per_batch_token * factor)

    def to_dict(self) -> dict[str, Any]:
        """Plain fields; measured operator tables by reference (``{gpu, model}`` of the vendored file)."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        tables = values.pop("operator_tables")
        if tables is not None:
            values["operator_tables"] = {"gpu": tables.gpu, "model": tables.model}
        return values

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> EngineProfile:
        values = dict(values)
        ref = values.get("operator_tables")
        if isinstance(ref, Mapping):
            values["operator_tables"] = measured_tables(str(ref.get("gpu")), str(ref.get("model")))
        return cls(**values)


@lru_cache(maxsize=65536)
def _tabulated_isolated_request_s(profile: EngineProfile, prompt_tokens: int, new_tokens: int, decodes: int) -> float:
    """``isolated_request_s`` summed step by step over the operator tables (memoised: SLO references ask
    for the same calls again)."""
    budget, cached, prefill_ms = profile.max_num_batched_tokens, prompt_tokens - new_tokens, 0.0
    while cached < prompt_tokens:
        chunk = min(budget, prompt_tokens - cached)
        prefill_ms += profile.step_ms(chunk, 0, 0, ((chunk, cached),))
        cached += chunk
    decode_ms = float(profile.decode_run_ms(1, prompt_tokens, decodes)[-1]) if decodes else 0.0
    return (prefill_ms + decode_ms) / 1e3


def _chunked_pairs(new_tokens: int, cached_tokens: int, budget: int) -> int:
    """Sum over a prompt's prefill chunks of (chunk tokens x tokens cached before the chunk)."""
    pairs, done, left = 0, cached_tokens, new_tokens
    while left > 0:
        chunk = min(budget, left)
        pairs, done, left = pairs + chunk * done, done + chunk, left - chunk
    return pairs


@dataclass(frozen=True)
class Architecture:
    params: float
    layers: int
    kv_heads: int
    head_dim: int
    max_model_len: int
    hidden_size: int = 0
    """The residual stream's width: what tensor-parallel all-reduces and pipeline hops carry per token."""
    dtype_bytes: int = 2

    @property
    def weight_bytes(self) -> float:
        return self.params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V, per layer, per KV head: 2 * layers * kv_heads * head_dim * dtype bytes."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes


@dataclass(frozen=True)
class Gpu:
    memory_gib: float
    hbm_gb_s: float
    bf16_tflops: float
    link_gb_s: float = 0.0
    """One direction of the GPU-to-GPU link within a server (NVLink, else PCIe)."""


def derive(model: str, gpu_name: str, arch: Architecture, gpu: Gpu, **overrides: Any) -> EngineProfile:
    """Roofline profile of ``model`` on ``gpu`` (docs/profiles.md walks through one)."""
    bandwidth = gpu.hbm_gb_s * 1e9 * HBM_EFFICIENCY
    kv_bandwidth = gpu.hbm_gb_s * 1e9 * KV_READ_EFFICIENCY
    flops = gpu.bf16_tflops * 1e12
    ms_per_token_compute = 2 * arch.params / (flops * COMPUTE_EFFICIENCY) * 1e3
    # Attention over cached tokens: QK^T and PV, 2 FLOPs per multiply-add, over every query head
    # (hidden_size wide), per layer; at the measured attention efficiency (operator_tables).
    ms_per_context_pair = 4 * arch.hidden_size * arch.layers / (flops * ATTENTION_EFFICIENCY) * 1e3
    values: dict[str, Any] = dict(
        name=f"{model}@{gpu_name}", model=model, gpu=gpu_name,
        prefill_ms_per_token=ms_per_token_compute,
        decode_base_ms=arch.weight_bytes / bandwidth * 1e3 + arch.layers * LAYER_LATENCY_MS,
        iteration_overhead_ms=ITERATION_OVERHEAD_MS,
        prefill_ms_per_context_pair=ms_per_context_pair,
        decode_ms_per_seq=2 * arch.params / (flops * DECODE_SEQ_EFFICIENCY) * 1e3,
        decode_ms_per_batch_token=arch.kv_bytes_per_token / kv_bandwidth * 1e3,
        kv_capacity_tokens=_kv_capacity_tokens(model, gpu_name, arch, gpu),
        max_model_len=arch.max_model_len,
    )
    values.update(overrides)
    return EngineProfile(**values)


def _kv_capacity_tokens(model: str, gpu_name: str, arch: Architecture, gpu: Gpu) -> int:
    kv_bytes = (gpu.memory_gib * GPU_MEMORY_UTILIZATION - ACTIVATION_RESERVE_GIB) * GIB - arch.weight_bytes
    if kv_bytes <= 0:
        raise ValueError(f"{model} does not fit on {gpu_name}: weights {arch.weight_bytes / GIB:.1f} GiB")
    return int(kv_bytes // arch.kv_bytes_per_token)


def measured_tables(gpu_name: str, model: str) -> OperatorTables:
    """The vendored operator tables of ``model`` on ``gpu_name`` (ValueError when not measured)."""
    data = measured_file(gpu_name)
    if data is None or model not in data["models"]:
        raise ValueError(f"no measured operator tables for {model} on {gpu_name}")
    return _tables(gpu_name, model)


@lru_cache(maxsize=64)
def _tables(gpu_name: str, model: str) -> OperatorTables:
    data = measured_file(gpu_name)
    assert data is not None
    return tables_from_json(gpu_name, model, data["models"][model], catalog_gpu(gpu_name).bf16_tflops)


def measured(model: str, gpu_name: str, **overrides: Any) -> EngineProfile:
    """The profile composed from the measured operator tables (operator_tables), with the memory of
    ``derive`` and, as its linear coefficients, the tables' least-squares fit (what the engine reports)."""
    tables = measured_tables(gpu_name, model)
    fit = measured_file(gpu_name)["models"][model]["linear_fit"]["coefficients"]  # type: ignore[index]
    arch, gpu = catalog_architecture(model), catalog_gpu(gpu_name)
    values: dict[str, Any] = dict(
        name=f"{model}@{gpu_name}", model=model, gpu=gpu_name, source="measured-operators",
        prefill_ms_per_token=fit["prefill_ms_per_token"], decode_base_ms=fit["decode_base_ms"],
        decode_ms_per_seq=fit["decode_ms_per_seq"], decode_ms_per_batch_token=fit["decode_ms_per_batch_token"],
        iteration_overhead_ms=ITERATION_OVERHEAD_MS,
        prefill_ms_per_context_pair=tables.prefix_ms_per_token_pair_per_layer * tables.layers,
        kv_capacity_tokens=_kv_capacity_tokens(model, gpu_name, arch, gpu),
        max_model_len=arch.max_model_len, operator_tables=tables,
    )
    values.update(overrides)
    return EngineProfile(**values)


@lru_cache(maxsize=1)
def _catalog() -> dict[str, Any]:
    return yaml.safe_load(CATALOG_PATH.read_text())


def catalog_names() -> list[str]:
    cat = _catalog()
    return [f"{m}@{g}" for m in cat["architectures"] for g in cat["gpus"]]


ROOFLINE_SUFFIX = "/roofline"


def load_profile(spec: str | Mapping[str, Any], **overrides: Any) -> EngineProfile:
    """``<model>@<gpu>`` from the catalog (composed from measured operator tables where the GPU was
    measured for that model, else the roofline; ``<model>@<gpu>/roofline`` always the roofline), a
    profile YAML (a path, or the name of one in hetflow/core/engine/profiles), or the profile's fields
    themselves (a stack config written by ``hetflow plan``, whose tensor- and pipeline-parallel
    replicas have no catalog entry)."""
    if isinstance(spec, Mapping):
        try:
            return EngineProfile.from_dict({**spec, **overrides})
        except TypeError as exc:
            raise ValueError(f"an inline profile needs exactly EngineProfile's fields: {exc}") from exc
    if spec.endswith((".yaml", ".yml")):
        path = Path(spec)
        if not path.exists() and (CATALOG_PATH.parent / path.name).exists():
            path = CATALOG_PATH.parent / path.name  # a profile shipped with hetflow, named by file
        values = yaml.safe_load(path.read_text())
        values.update(overrides)
        return EngineProfile.from_dict(values)
    roofline = spec.endswith(ROOFLINE_SUFFIX)
    model, _, gpu_name = spec.removesuffix(ROOFLINE_SUFFIX).partition("@")
    cat = _catalog()
    if model not in cat["architectures"] or gpu_name not in cat["gpus"]:
        raise ValueError(f"unknown profile {spec!r}; built-in: {', '.join(catalog_names())}")
    if not roofline and model in measured_models(gpu_name):
        return measured(model, gpu_name, **overrides)
    return derive(model, gpu_name, catalog_architecture(model), catalog_gpu(gpu_name), **overrides)


def catalog_architecture(model: str) -> Architecture:
    values = _catalog()["architectures"].get(model)
    if values is None:
        raise ValueError(f"unknown architecture {model!r}; built-in: {', '.join(_catalog()['architectures'])}")
    fields: dict[str, Any] = {k: float(v) if k == "params" else int(v) for k, v in values.items()}  # YAML 1.1
    return Architecture(**fields)  # reads "1.5e9" as a string


def catalog_gpu(name: str) -> Gpu:
    values = _catalog()["gpus"].get(name)
    if values is None:
        raise ValueError(f"unknown GPU {name!r}; built-in: {', '.join(_catalog()['gpus'])}")
    return Gpu(**{k: float(v) for k, v in values.items()})


@dataclass(frozen=True)
class EngineSpec:
    """One engine of a cluster: its id, the model it serves and its timing profile."""

    engine_id: str
    model: str
    profile: EngineProfile
