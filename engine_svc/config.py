"""engine_svc configuration: one engine entry of the stack YAML's ``engines`` list."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from hetflow.core.engine.queues import QueueConfig
from hetflow.runtime.config import engine_section, service_config
from hetflow.runtime.server import ServeConfig


@dataclass(frozen=True)
class VllmConfig:
    """Settings of the in-process vLLM AsyncLLM (``backend: vllm``)."""

    model_dir: str = ""
    """Model directory or name; empty uses the tiny local Llama made by ``hetflow.runtime.tinymodel``."""
    load_format: str = "dummy"
    """``dummy`` initialises random weights from config.json (no download)."""
    dtype: str = "bfloat16"
    max_num_seqs: int = 8
    max_model_len: int = 2048
    block_size: int = 16
    kv_cache_gib: float = 0.25
    """KV cache size on CPU backends (VLLM_CPU_KVCACHE_SPACE)."""
    gpu_memory_utilization: float = 0.9
    enforce_eager: bool = True
    seed: int = 0
    enable_prefix_caching: bool = True
    """vLLM's automatic prefix caching. ``hetflow profile`` turns it off: the engine model does not
    model cache hits, so measuring with them would make prefill look free."""


@dataclass(frozen=True)
class EngineConfig:
    name: str
    """Engine id, unique in the stack."""
    model: str = ""
    """Model name the balancer and router know this engine by; defaults to the profile's model."""
    backend: str = "sim"
    """``sim`` (engine model in real time) or ``vllm``."""
    profile: str = "qwen2.5-1.5b-instruct@a100-80g"
    """Catalog name ``<model>@<gpu>`` or a profile YAML path (``hetflow profile`` writes those)."""
    advertise_address: str = ""
    """host:port the balancer dials; defaults to serve.host:serve.port."""
    monitor_address: str = ""
    """Where status reports go; empty disables reporting."""
    report_interval_s: float = 0.5
    max_tokens_limit: int = 32768
    """Largest max_tokens accepted."""
    stream_interval_tokens: int = 1
    """Send a chunk every this many tokens (the first token always at once), as vLLM's stream_interval:
    fewer messages per token where the CPU that streams is the CPU that computes."""
    sim_output_median_tokens: int = 128
    """sim backend: median output length when the call does not set ignore_eos."""
    queue: QueueConfig = field(default_factory=QueueConfig)
    vllm: VllmConfig = field(default_factory=VllmConfig)
    serve: ServeConfig = field(default_factory=ServeConfig)


def from_stack(raw: Mapping[str, Any], name: str) -> EngineConfig:
    host = raw.get("stack", {}).get("host", "127.0.0.1")
    monitor = raw.get("monitor", {})
    defaults = {"host": host}
    if "port" in monitor:
        defaults["monitor_address"] = f"{monitor.get('host', host)}:{monitor['port']}"
    section = engine_section(raw, name)
    if isinstance(section.get("queue"), Mapping):
        section["queue"] = QueueConfig.from_mapping(section["queue"])
    return service_config(EngineConfig, section, f"engines[{name}]", defaults)
