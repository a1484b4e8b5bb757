"""Engine timing profiles: how long one continuous-batching iteration takes, and KV capacity.

Iteration time follows the load-balancer paper (section 3, figure 4): batch time grows linearly
with the prefill tokens in the batch (slope grad_1) and slowly with the tokens already in decode
(slope grad_2). We split the decode term in two, a per-sequence compute cost and a per-context-token
KV read, and add a fixed cost for reading the weights once per iteration:

    step_ms = decode_base_ms + prefill_ms_per_token * prefill_tokens
              + decode_ms_per_seq * decode_seqs + decode_ms_per_batch_token * decode_context_tokens

Built-in profiles are derived from the architecture and the GPU by a roofline estimate
(``derive``; docs/profiles.md); measured ones are written by ``hetflow profile`` as plain YAML.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import yaml

CATALOG_PATH = Path(__file__).resolve().parent / "profiles" / "catalog.yaml"
GIB = 1024**3

# Roofline efficiencies: the share of datasheet bandwidth and compute a tuned engine reaches.
HBM_EFFICIENCY = 0.7          # decode streams weights and KV at ~70% of peak bandwidth
COMPUTE_EFFICIENCY = 0.5      # prefill GEMMs at ~50% MFU
ITERATION_OVERHEAD_MS = 1.5   # scheduler + sampling + launch cost per iteration (CUDA graphs on)
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
    """Iteration time of an empty batch: weight reads plus fixed overhead."""
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
    """How the numbers were obtained: "roofline" estimate or "measured" by hetflow profile."""

    @property
    def num_kv_blocks(self) -> int:
        return self.kv_capacity_tokens // self.block_size

    @property
    def decode_ms_per_token(self) -> float:
        """Pi[m].decode_ms_per_token (Chimera 3.6): iteration time of a full batch at a representative context."""
        return self.step_ms(prefill_tokens=0, decode_seqs=self.max_num_seqs,
                            decode_context_tokens=self.max_num_seqs * REPRESENTATIVE_CONTEXT)

    def step_ms(self, prefill_tokens: int, decode_seqs: int, decode_context_tokens: int) -> float:
        """Iteration time of one batch (load-balancer paper, section 3, split as in the module docstring)."""
        return (self.decode_base_ms
                + self.prefill_ms_per_token * prefill_tokens
                + self.decode_ms_per_seq * decode_seqs
                + self.decode_ms_per_batch_token * decode_context_tokens)

    def isolated_request_s(self, prompt_tokens: int, output_tokens: int, cached_tokens: int = 0) -> float:
        """Latency of one request alone on this engine: the prefill iteration(s) of the prompt tokens not
        in the prefix cache, which yield the first token, then one decode iteration per further token
        over a growing context (closed form of the sum of ``step_ms``). The reference for SLO scales
        (HexGen-Flow 5.1)."""
        new_tokens = max(1, prompt_tokens - cached_tokens)
        chunks = -(-new_tokens // self.max_num_batched_tokens)
        prefill_ms = chunks * self.decode_base_ms + self.prefill_ms_per_token * new_tokens
        decodes = max(0, output_tokens - 1)
        context_sum = decodes * prompt_tokens + decodes * (decodes - 1) / 2  # decode k reads P + k - 1 tokens
        decode_ms = (decodes * (self.decode_base_ms + self.decode_ms_per_seq)
                     + self.decode_ms_per_batch_token * context_sum)
        return (prefill_ms + decode_ms) / 1e3

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> EngineProfile:
        return cls(**dict(values))


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
    flops = gpu.bf16_tflops * 1e12 * COMPUTE_EFFICIENCY
    ms_per_token_compute = 2 * arch.params / flops * 1e3
    kv_bytes = (gpu.memory_gib * GPU_MEMORY_UTILIZATION - ACTIVATION_RESERVE_GIB) * GIB - arch.weight_bytes
    if kv_bytes <= 0:
        raise ValueError(f"{model} does not fit on {gpu_name}: weights {arch.weight_bytes / GIB:.1f} GiB")
    values: dict[str, Any] = dict(
        name=f"{model}@{gpu_name}", model=model, gpu=gpu_name,
        prefill_ms_per_token=ms_per_token_compute,
        decode_base_ms=arch.weight_bytes / bandwidth * 1e3 + ITERATION_OVERHEAD_MS,
        decode_ms_per_seq=ms_per_token_compute,
        decode_ms_per_batch_token=arch.kv_bytes_per_token / bandwidth * 1e3,
        kv_capacity_tokens=int(kv_bytes // arch.kv_bytes_per_token),
        max_model_len=arch.max_model_len,
    )
    values.update(overrides)
    return EngineProfile(**values)


@lru_cache(maxsize=1)
def _catalog() -> dict[str, Any]:
    return yaml.safe_load(CATALOG_PATH.read_text())


def catalog_names() -> list[str]:
    cat = _catalog()
    return [f"{m}@{g}" for m in cat["architectures"] for g in cat["gpus"]]


def load_profile(spec: str | Mapping[str, Any], **overrides: Any) -> EngineProfile:
    """``<model>@<gpu>`` from the catalog, a profile YAML (a path, or the name of one in
    hetflow/core/engine/profiles), or the profile's fields themselves (a stack config written by
    ``hetflow plan``, whose tensor- and pipeline-parallel replicas have no catalog entry)."""
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
    model, _, gpu_name = spec.partition("@")
    cat = _catalog()
    if model not in cat["architectures"] or gpu_name not in cat["gpus"]:
        raise ValueError(f"unknown profile {spec!r}; built-in: {', '.join(catalog_names())}")
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
