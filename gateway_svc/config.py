"""gateway_svc configuration: the stack YAML's ``gateway`` section."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from hetflow.runtime.config import service_config, stack_defaults
from hetflow.runtime.server import STREAMING_GRACE_S, ServeConfig

DEFAULT_PORT = 8000
"""vLLM's OpenAI server's port, so a client's base URL changes host only."""


@dataclass(frozen=True)
class GatewayConfig:
    balancer_address: str = ""
    """The balancer the gateway forwards every call to."""
    monitor_address: str = ""
    """Where ``/v1/models`` reads the models healthy engines serve."""
    router_model: str = "hetflow"
    """The model name that lets the balancer's router choose; any served model name pins that model."""
    default_max_tokens: int = 1024
    """max_tokens of a request that sets none (OpenAI's default is the model's context)."""
    max_body_bytes: int = 4 * 1024 * 1024
    """Larger request bodies answer 413."""
    body_timeout_s: float = 30.0
    """A request body not read whole within this answers 408: a client that stalls mid-upload gives its
    ``max_in_flight`` place back."""
    models_cache_s: float = 2.0
    """How long the served-model list read from the monitor is reused."""
    dependency_timeout_s: float = 2.0
    """Timeout of the monitor call behind ``/v1/models`` and the model check, and of ``/health``'s check of
    the balancer."""
    direct: bool = True
    """Stream each call's tokens from its engine, the balancer only deciding (``Balancer.Decide``, issue
    34); the engines' addresses must be reachable from the gateway. False: the balancer relays them."""
    stream_from_model_server: bool = True
    """On the direct path, a call whose engine fronts a model server (the ``vllm-server`` backend) is
    streamed from that server itself once the engine's queue gives it its turn (``Engine.Hold``): no
    Python process relays its tokens. The model servers must be reachable from the gateway. False: every
    call streams through its engine service."""
    max_in_flight: int = 0
    """Calls the gateway carries at once (from the request's arrival to its response's end); a call past it
    is answered 429 with ``Retry-After`` before its body is read. 0: no bound."""
    overload_retry_after_s: float = 1.0
    """The ``Retry-After`` of a call refused for ``max_in_flight``."""
    responses_store_max: int = 10_000
    """Stored responses (the Responses API's ``store``) the gateway keeps for each tenant; the oldest go
    first."""
    responses_store_max_chars: int = 256 * 1024 * 1024
    """Text the stored responses of one tenant may add up to (what each added to its conversation); the
    oldest go first past it."""
    responses_store_ttl_s: float = 3600.0
    """How long a stored response can be read or continued (``previous_response_id``)."""
    serve: ServeConfig = field(default_factory=ServeConfig)

    def __post_init__(self) -> None:
        if self.responses_store_max < 0 or self.responses_store_ttl_s <= 0 or self.responses_store_max_chars < 0:
            raise ValueError("gateway.responses_store_max and responses_store_max_chars must be at least 0 and "
                             "responses_store_ttl_s positive")
        if self.default_max_tokens < 1:
            raise ValueError(f"gateway.default_max_tokens must be at least 1, got {self.default_max_tokens}")
        if self.max_in_flight < 0 or self.overload_retry_after_s <= 0:
            raise ValueError("gateway.max_in_flight must be at least 0 and overload_retry_after_s positive")
        if not self.body_timeout_s > 0:
            raise ValueError(f"gateway.body_timeout_s must be positive, got {self.body_timeout_s}")
        if self.max_body_bytes < 1024:
            raise ValueError(f"gateway.max_body_bytes must be at least 1024, got {self.max_body_bytes}")


def from_stack(raw: Mapping[str, Any]) -> GatewayConfig:
    defaults = {**stack_defaults(raw, "gateway"), "port": DEFAULT_PORT, "serve": {"grace_s": STREAMING_GRACE_S}}
    host = defaults["host"]
    for name in ("balancer", "monitor"):
        section = raw.get(name, {})
        if "port" in section:
            defaults[f"{name}_address"] = f"{section.get('host', host)}:{section['port']}"
    return service_config(GatewayConfig, raw.get("gateway", {}), "gateway", defaults)
