"""What a running ``vllm serve`` says about its load on ``/metrics`` (vLLM v1's Prometheus names,
``vllm/v1/metrics/loggers.py``), summed over its engines and models."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class VllmServerLoad:
    waiting: int = 0
    """``vllm:num_requests_waiting``"""
    running: int = 0
    """``vllm:num_requests_running``"""
    kv_cache_usage: float = 0.0
    """``vllm:kv_cache_usage_perc`` (a fraction, 0..1, despite the name); the mean over engines."""
    preemptions_total: int = 0
    """``vllm:num_preemptions_total``"""
    engine_steps: int = 0
    """Engine steps so far: the count of ``vllm:iteration_tokens_total``, one observation per step."""
    num_gpu_blocks: int = 0
    """From ``vllm:cache_config_info``'s labels."""
    block_size: int = 0


def parse(text: str) -> VllmServerLoad:
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    info: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
            counts[sample.name] = counts.get(sample.name, 0) + 1
            if sample.name.startswith("vllm:cache_config_info"):
                info = dict(sample.labels)
    kv = "vllm:kv_cache_usage_perc"
    return VllmServerLoad(
        waiting=int(sums.get("vllm:num_requests_waiting", 0)),
        running=int(sums.get("vllm:num_requests_running", 0)),
        kv_cache_usage=sums.get(kv, 0.0) / max(1, counts.get(kv, 0)),
        preemptions_total=int(sums.get("vllm:num_preemptions_total", 0)),
        engine_steps=int(sums.get("vllm:iteration_tokens_total_count", 0)),
        num_gpu_blocks=int(float(info.get("num_gpu_blocks", 0) or 0)),
        block_size=int(float(info.get("block_size", 0) or 0)))
