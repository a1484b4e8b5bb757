"""engine_svc configuration: one engine entry of the stack YAML's ``engines`` list."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping
from urllib.parse import urlsplit

from hetflow.core.engine.queues import QueueConfig
from hetflow.runtime.config import engine_section, service_config, stack_defaults
from hetflow.runtime.server import STREAMING_GRACE_S, ServeConfig


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
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    """The replica's parallelism (vLLM's engine arguments); it runs on tensor x pipeline GPUs, which
    ``hetflow compose`` and ``hetflow kube`` reserve (``hetflow plan`` chooses them, Cascadia 3.2)."""

    def __post_init__(self) -> None:
        if self.tensor_parallel_size < 1 or self.pipeline_parallel_size < 1:
            raise ValueError("vllm.tensor_parallel_size and vllm.pipeline_parallel_size must be >= 1")


@dataclass(frozen=True)
class VllmServerConfig:
    """Settings of an engine that fronts a running ``vllm serve`` (``backend: vllm-server``)."""

    base_url: str = ""
    """The server's root URL, e.g. ``http://10.0.0.5:8000`` (no ``/v1``)."""
    served_model: str = ""
    """The model name the server answers to (its ``--served-model-name``); empty takes its first."""
    max_num_seqs: int = 256
    """Requests hetflow keeps inside the server at once: the server's ``--max-num-seqs``."""
    pass_priority: bool = True
    """Send hetflow's order as vLLM's request ``priority``; the server must run with
    ``--scheduling-policy priority``."""
    metrics_interval_s: float = 0.25
    """How often the server's ``/metrics`` is read (waiting, running, KV usage, engine steps) while hetflow
    has requests in the server or waiting for it."""
    metrics_idle_interval_s: float = 5.0
    """How often it is read while hetflow has none there (and at once when a call comes): an idle server's
    load moves only with other clients' requests, and each read of vLLM's 52 KB page and its parse cost
    the engine service a few tenths of a millisecond of CPU, which four times a second was most of an
    idle engine's CPU (issue 63)."""
    startup_timeout_s: float = 300.0
    """How long start-up waits for the server to answer (it may still be loading its model)."""
    request_timeout_s: float = 3600.0
    """Longest a request's stream may stay silent before it fails UNAVAILABLE."""
    server_backlog: int = 0
    """Requests hetflow lets wait inside the server beyond ``max_num_seqs``: a finished request's slot is
    then filled by the server at once, not after hetflow's next admission reaches it (which on a
    starved host costs a slot its idle time); the server orders them by the priority hetflow passes."""
    connection_retries: int = 1
    """Times a request is sent again when its connection fails before any token (a reset): as a proxy
    retries a reset before the response; vLLM aborts a request whose client went, so none runs twice. (A
    kept-alive connection the server had closed is replaced by the client itself, ``hetflow.runtime.http1``.)"""

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1:
            raise ValueError(f"vllm_server.max_num_seqs must be at least 1, got {self.max_num_seqs}")
        if self.server_backlog < 0 or self.connection_retries < 0:
            raise ValueError("vllm_server.server_backlog and connection_retries must be >= 0")
        if not 0 < self.metrics_interval_s <= self.metrics_idle_interval_s:
            raise ValueError("vllm_server.metrics_interval_s must be > 0 and at most metrics_idle_interval_s, got "
                             f"{self.metrics_interval_s} and {self.metrics_idle_interval_s}")


@dataclass(frozen=True)
class EngineConfig:
    name: str
    """Engine id, unique in the stack."""
    model: str = ""
    """Model name the balancer and router know this engine by; defaults to the profile's model."""
    backend: str = "sim"
    """``sim`` (engine model in real time), ``vllm`` (vLLM in process) or ``vllm-server`` (a running
    ``vllm serve``)."""
    profile: str | Mapping[str, Any] = "qwen2.5-1.5b-instruct@a100-80g"
    """Catalog name ``<model>@<gpu>``, a profile YAML path (``hetflow profile`` writes those) or the
    profile's fields inline (``hetflow plan`` writes those for tensor- and pipeline-parallel replicas)."""
    advertise_address: str = ""
    """host:port the balancer dials; defaults to serve.host:serve.port."""
    monitor_address: str = ""
    """Where status reports go; empty disables reporting."""
    report_interval_s: float = 0.5
    """How often the engine looks at its status for the monitor."""
    report_heartbeat_s: float = 1.0
    """The longest time between two reports: a status that has not changed since the last report waits
    until then. Keep it under the monitor's ``engine_stale_after_s`` (2 s), which takes an engine that
    stops reporting out of the decisions."""
    max_tokens_limit: int = 32768
    """Largest max_tokens accepted."""
    max_waiting: int = 4096
    """Calls waiting for their first token at most (hetflow's queue and the backend's); past it a call is
    RESOURCE_EXHAUSTED, and its balancer tries another engine."""
    stream_interval_tokens: int = 1
    """Send a chunk every this many tokens (the first token always at once), as vLLM's stream_interval:
    fewer messages per token where the CPU that streams is the CPU that computes."""
    sim_output_median_tokens: int = 128
    """sim backend: median output length when the call does not set ignore_eos."""
    sim_script: str = ""
    """sim backend: a YAML file of scripted answers (``engine_svc.backends.sim_script``): agent frameworks'
    handoffs and tool calls on a simulated stack. Empty: every answer is filler."""
    queue: QueueConfig = field(default_factory=QueueConfig)
    vllm: VllmConfig = field(default_factory=VllmConfig)
    vllm_server: VllmServerConfig = field(default_factory=VllmServerConfig)
    serving_endpoint: str = ""
    """ip:port of this engine's model server's own HTTP API, where a standard gateway sends the calls
    hetflow's endpoint picker assigns here (issue 34); the ``vllm-server`` backend's defaults to its
    ``base_url``'s host and port."""
    serve: ServeConfig = field(default_factory=ServeConfig)

    @property
    def model_server_endpoint(self) -> str:
        if self.serving_endpoint or self.backend != "vllm-server" or not self.vllm_server.base_url:
            return self.serving_endpoint
        url = urlsplit(self.vllm_server.base_url)
        return f"{url.hostname}:{url.port or (443 if url.scheme == 'https' else 80)}"


def from_stack(raw: Mapping[str, Any], name: str) -> EngineConfig:
    monitor = raw.get("monitor", {})
    defaults = {**stack_defaults(raw, "engine"), "serve": {"grace_s": STREAMING_GRACE_S}}
    host = defaults["host"]
    if "port" in monitor:
        defaults["monitor_address"] = f"{monitor.get('host', host)}:{monitor['port']}"
    section = engine_section(raw, name)
    if isinstance(section.get("queue"), Mapping):
        section["queue"] = QueueConfig.from_mapping(section["queue"])
    return service_config(EngineConfig, section, f"engines[{name}]", defaults)
