"""Parallelism strategies and the timing profile of one replica under them (Cascadia 3.2, appendix B).

A model type given ``f`` GPUs runs ``dp`` replicas, each over ``tp * pp`` GPUs (Cascadia 3.2: the
replicas' ``sum tp * pp <= f``; here the replicas of one model type share one (tp, pp), the
homogeneous case, and GPUs left over stay idle). Cascadia's simulator scales each operator's cost by
``1/N`` under N-way tensor parallelism and corrects it with a speed-up coefficient K(N) from
micro-benchmarks, and models pipeline communication by volume (appendix B). This module derives both
from the architecture and the GPU's link, as the roofline profiles are derived (``derive``):

- tensor parallelism ``t``: weights, compute and KV heads split ``t`` ways (KV heads replicated when
  ``t`` exceeds them); each layer adds two ring all-reduces of the batch's activations,
  ``2 (t-1)/t * tokens * hidden * dtype`` bytes over the link plus a fixed latency each. Those
  all-reduces are what makes K(t) < t;
- pipeline parallelism ``p``: layers split ``p`` ways, so each GPU holds ``1/p`` of the weights and
  of each token's KV; ``p`` micro-batches are in flight at once (vLLM's virtual engines), each seeing
  the whole model's iteration time plus ``p - 1`` hops of its activations between stages. A replica
  is therefore simulated as ``p`` engines of the full model, each with ``1/p`` of the replica's KV.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from hetflow.core.engine.profile import (
    ACTIVATION_RESERVE_GIB,
    GIB,
    GPU_MEMORY_UTILIZATION,
    KV_READ_EFFICIENCY,
    LAYER_LATENCY_MS,
    Architecture,
    EngineProfile,
    Gpu,
    derive,
)

COLLECTIVE_LATENCY_MS = 0.008
"""Fixed cost of one all-reduce or pipeline send of a small message over NVLink (~8 us)."""
TENSOR_DEGREES = (1, 2, 4, 8)
"""Tensor parallelism stays within one 8-GPU server (Cascadia 4.1's servers)."""
PIPELINE_DEGREES = (1, 2, 4, 8)


@dataclass(frozen=True, order=True)
class Parallelism:
    dp: int
    tp: int
    pp: int

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp

    def __str__(self) -> str:
        return f"DP={self.dp},TP={self.tp},PP={self.pp}"


def strategies(gpus: int) -> list[Parallelism]:
    """Every homogeneous (dp, tp, pp) that uses at most ``gpus`` GPUs with as many replicas as fit."""
    return [Parallelism(gpus // (tp * pp), tp, pp) for tp in TENSOR_DEGREES for pp in PIPELINE_DEGREES
            if tp * pp <= gpus]


def fits(arch: Architecture, gpu: Gpu, tp: int, pp: int) -> bool:
    """Whether a (tp, pp) replica holds the weights with room left for KV."""
    return _kv_bytes_per_gpu(arch, gpu, tp, pp) > 0


def _kv_bytes_per_gpu(arch: Architecture, gpu: Gpu, tp: int, pp: int) -> float:
    return (gpu.memory_gib * GPU_MEMORY_UTILIZATION - ACTIVATION_RESERVE_GIB) * GIB - arch.weight_bytes / (tp * pp)


def virtual_engine_profile(model: str, gpu_name: str, arch: Architecture, gpu: Gpu, tp: int, pp: int) -> EngineProfile:
    """One of a (tp, pp) replica's ``pp`` virtual engines (module docstring). ValueError when the replica
    cannot hold the model."""
    if not fits(arch, gpu, tp, pp):
        raise ValueError(f"{model} does not fit on TP={tp} x PP={pp} {gpu_name}: weights "
                         f"{arch.weight_bytes / GIB:.1f} GiB over {tp * pp} GPUs of {gpu.memory_gib:g} GiB")
    if (tp > 1 or pp > 1) and not (arch.hidden_size and gpu.link_gb_s):
        raise ValueError(f"tensor or pipeline parallelism needs {model}'s hidden_size and {gpu_name}'s link_gb_s")
    one_gpu = derive(model, gpu_name, replace(arch, params=arch.params / (tp * pp)), gpu)  # a stage's share
    link_bytes_per_ms = gpu.link_gb_s * 1e9 / 1e3 if gpu.link_gb_s else 1.0
    token_bytes = arch.hidden_size * arch.dtype_bytes
    all_reduces = 2 * arch.layers if tp > 1 else 0  # attention and MLP outputs, every layer
    reduce_ms_per_token = all_reduces * 2 * (tp - 1) / tp * token_bytes / link_bytes_per_ms
    hop_ms_per_token = (pp - 1) * token_bytes / link_bytes_per_ms
    fixed_ms = (all_reduces + (pp - 1)) * COLLECTIVE_LATENCY_MS
    kv_heads_split = min(tp, arch.kv_heads)
    kv_per_token_per_gpu = arch.kv_bytes_per_token / (kv_heads_split * pp)
    replica_kv_tokens = int(_kv_bytes_per_gpu(arch, gpu, tp, pp) // kv_per_token_per_gpu)
    hbm_bytes_per_ms = gpu.hbm_gb_s * 1e9 * KV_READ_EFFICIENCY / 1e3
    layer_floor_ms = arch.layers * LAYER_LATENCY_MS
    return replace(
        one_gpu,
        name=f"{model}@{gpu_name}:tp{tp}pp{pp}",
        # One micro-batch's iteration runs the pp stages in turn, each on 1/(tp pp) of the weights.
        # Each stage reads its share of the weights; every layer's latency floor is paid once, on its stage.
        decode_base_ms=pp * (one_gpu.decode_base_ms - layer_floor_ms) + layer_floor_ms + fixed_ms,
        prefill_ms_per_token=pp * one_gpu.prefill_ms_per_token + reduce_ms_per_token + hop_ms_per_token,
        decode_ms_per_seq=pp * one_gpu.decode_ms_per_seq + reduce_ms_per_token + hop_ms_per_token,
        decode_ms_per_batch_token=arch.kv_bytes_per_token / kv_heads_split / hbm_bytes_per_ms,
        prefill_ms_per_context_pair=one_gpu.prefill_ms_per_context_pair / tp,  # heads split; stages in turn
        kv_capacity_tokens=replica_kv_tokens // pp,
    )
