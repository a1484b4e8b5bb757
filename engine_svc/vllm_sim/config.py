"""vllm-sim configuration: one entry of the stack YAML's ``vllm_sim`` list."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from hetflow.runtime.config import service_config, stack_defaults
from hetflow.runtime.server import ServeConfig

SCHEDULING_POLICIES = ("fcfs", "priority")


@dataclass(frozen=True)
class VllmSimConfig:
    name: str
    """The server's name in the stack."""
    profile: str | Mapping[str, Any] = "qwen2.5-7b-instruct@h100-80g"
    """The engine's timing and KV profile: a catalog name ``<model>@<gpu>``, a profile YAML or its
    fields inline (``hetflow.core.engine.profile.load_profile``)."""
    served_model_name: str = ""
    """The model name the server answers to (vLLM's ``--served-model-name``); default: the profile's."""
    tokenizer: str = ""
    """The tokenizer directory it counts tokens with (a Hugging Face tokenizer: give the same one to
    ``vllm bench serve --tokenizer``); empty: the tiny local Llama's, built by
    ``hetflow.runtime.tinymodel`` if missing."""
    time_scale: float = 1.0
    """Each engine iteration takes the profile's time times this, so a small host keeps up; every time
    constant of a comparison (arrivals, tool gaps, SLOs, a router's intervals) must scale with it."""
    scheduling_policy: str = "fcfs"
    """vLLM's ``--scheduling-policy``: ``fcfs``, or ``priority`` (lower request ``priority`` first)."""
    output_median_tokens: int = 128
    """Median output length of a request that does not set ``ignore_eos`` (drawn log-normal, seeded
    by its request id)."""
    enable_scale_out: bool = False
    """vLLM's ``--enable-scale-out``: ``POST /v1/chat/completions/render`` and ``/v1/completions/render``
    answer with the token ids the request would run (vLLM's ``GenerateRequest``), which vLLM's router's
    ``cache_aware`` policy matches prefixes on; off, they answer 403 as vLLM's do. The other scale-out
    routes are not simulated (501)."""
    serve: ServeConfig = field(default_factory=ServeConfig)

    def __post_init__(self) -> None:
        if self.time_scale <= 0:
            raise ValueError(f"vllm_sim[{self.name}].time_scale must be > 0, got {self.time_scale}")
        if self.scheduling_policy not in SCHEDULING_POLICIES:
            raise ValueError(f"vllm_sim[{self.name}].scheduling_policy must be one of {SCHEDULING_POLICIES}, "
                             f"got {self.scheduling_policy!r}")
        if self.output_median_tokens < 1:
            raise ValueError(f"vllm_sim[{self.name}].output_median_tokens must be >= 1")


def from_stack(raw: Mapping[str, Any], name: str) -> VllmSimConfig:
    for entry in raw.get("vllm_sim", []):
        if entry.get("name") == name:
            return service_config(VllmSimConfig, entry, f"vllm_sim[{name}]", stack_defaults(raw, "engine"))
    names = [e.get("name") for e in raw.get("vllm_sim", [])]
    raise ValueError(f"no vllm_sim server named {name!r} in the config; vllm_sim: {names}")
