"""What a running ``vllm serve`` says about its load on ``/metrics`` (vLLM v1's Prometheus names,
``vllm/v1/metrics/loggers.py``), summed over its engines and models.

The backend reads the page every ``metrics_interval_s`` (0.25 s) while it has requests in the server
(every ``metrics_idle_interval_s`` while idle), in the engine service's event loop, and vLLM 0.32's page
is about 600 lines, most of them histogram buckets it never reads: ``parse`` scans only
the lines of the series it reads instead of parsing the whole page with prometheus_client (under load a
fifth of the engine service's samples were in that parser, py-spy, docs/benchmarks.md);
``tests/engine_svc/test_vllm_metrics.py`` checks it against the full parser on a real page.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

RUNNING, WAITING, KV_USAGE, PREEMPTIONS, STEPS, CACHE_INFO = (
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
    "vllm:num_preemptions_total", "vllm:iteration_tokens_total_count", "vllm:cache_config_info")
READ = frozenset({RUNNING, WAITING, KV_USAGE, PREEMPTIONS, STEPS, CACHE_INFO})
LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


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
    prefix_caching: bool = False
    """``enable_prefix_caching``: the server holds a block its requests share once."""


def samples(text: str, names: frozenset[str] = READ) -> dict[str, list[tuple[str, float]]]:
    """The samples of the series ``names`` (those ``parse`` reads by default): per series name, each
    sample's label text and value (the Prometheus text format: ``name{labels} value [timestamp]``,
    comments and other series skipped)."""
    found: dict[str, list[tuple[str, float]]] = {}
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        brace = line.find("{")
        name_end = brace if brace >= 0 else line.find(" ")
        name = line[:name_end]
        if name not in names:
            continue
        labels_end = line.rindex("}") + 1 if brace >= 0 else name_end
        found.setdefault(name, []).append((line[name_end:labels_end], float(line[labels_end:].split()[0])))
    return found


def parse(text: str) -> VllmServerLoad:
    found = samples(text)

    def total(name: str) -> float:
        return sum(value for _, value in found.get(name, ()))

    kv = found.get(KV_USAGE, [])
    info = dict(LABEL.findall(found[CACHE_INFO][-1][0])) if CACHE_INFO in found else {}
    return VllmServerLoad(
        waiting=int(total(WAITING)), running=int(total(RUNNING)),
        kv_cache_usage=sum(value for _, value in kv) / max(1, len(kv)),
        preemptions_total=int(total(PREEMPTIONS)), engine_steps=int(total(STEPS)),
        num_gpu_blocks=int(float(info.get("num_gpu_blocks", 0) or 0)),
        block_size=int(float(info.get("block_size", 0) or 0)),
        prefix_caching=info.get("enable_prefix_caching") == "True")
