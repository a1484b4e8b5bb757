"""balancer_svc configuration: the stack YAML's ``balancer`` section."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from hetflow.core.cascade.config import CascadeConfig
from hetflow.core.policy_config import PolicyConfig
from hetflow.runtime.config import service_config, stack_defaults
from hetflow.runtime.server import ServeConfig


@dataclass(frozen=True)
class BalancerConfig:
    monitor_address: str = ""
    router_address: str = ""
    predictor_address: str = ""
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    quantiles: tuple[float, ...] = (0.1, 0.9)
    """Quantiles of the remaining-token prediction asked for and written in the receipt."""
    max_tokens_limit: int = 32768
    """Largest max_tokens a call may ask for."""
    past_deadline: str = "reject"
    """A call that arrives after its program's deadline: "reject" (DEADLINE_EXCEEDED) or "best-effort"
    (served without the deadline; the receipt says so)."""
    alpha_tuning: bool = True
    """HexGen-Flow 4.3: re-tune the engine stage's alpha by replay when tail latency regresses; only
    where the engine stage has an alpha (workload-balanced, or memory-packer then workload-balanced)."""
    alpha_window_s: float = 100.0
    """The tuner's sliding window (HexGen-Flow: 100 s)."""
    dependency_timeout_s: float = 2.0
    """Timeout of each router, predictor and monitor call on the request path."""
    stale_snapshot_max_s: float = 30.0
    """While the monitor does not answer, calls are decided on its last snapshot up to this old (the
    receipt's ``stale_snapshot_s`` says how old) and told to it once it answers; past it they fail
    UNAVAILABLE."""
    max_held_calls: int = 4096
    """Calls waiting in the hold queue for KV room at most; past it a call is RESOURCE_EXHAUSTED."""
    max_hold_s: float = 120.0
    """The longest a call waits for KV room (its program's deadline may end the wait sooner); then it is
    RESOURCE_EXHAUSTED with a retry hint."""
    tenant_limits: Mapping[str, Any] = field(default_factory=dict)
    """Per-tenant caps: ``{default: {max_in_flight, rate_per_s, burst}, tenants: {name: {...}}}``
    (``hetflow.core.admission``); none by default."""
    max_calls: int = 4096
    """Calls in the balancer at once (deciding, held or streaming); past it RESOURCE_EXHAUSTED with a retry
    hint (0 = no cap)."""
    max_loop_lag_s: float = 0.005
    """New calls are refused (RESOURCE_EXHAUSTED, retry hint) while the balancer's event loop runs later
    than this (median of the last 0.5 s of probes): its turns are then long, and gRPC, which accepts one
    call per turn, leaves calls unaccepted until it cancels them at 30 s (0 = never on lag; measured in
    docs/reliability.md: 0.1 ms at light load, 4-10 ms at 3x saturation)."""
    accept_wait_target_s: float = 0.05
    """New calls are refused (RESOURCE_EXHAUSTED, retry hint) while calls wait to be taken longer than this:
    the shortest wait over ``accept_wait_interval_s`` (at least 8 calls) above it, CoDel's standing queue
    (``hetflow.core.load_shedding.AcceptWaits``). A call's wait is known when its client sends its timeout
    (``hetflow.runtime.accept_wait``; hetflow's client does, on a connected channel; gRPC's rounding makes it
    read low, docs/reliability.md). 0 = never on waits."""
    accept_wait_interval_s: float = 0.2
    """The window of calls whose shortest wait decides a standing queue: a burst whose calls are all taken
    within it passes whole."""
    decide_burst_calls: int = 128
    """Calls that only ask for a decision (``Decide``, the endpoint picker) a late loop still takes: a burst
    this size is taken whole, while overload that lasts is refused once it is spent
    (``hetflow.core.load_shedding``; 0 = none, on lag alone as relayed calls)."""
    decide_burst_refill_s: float = 10.0
    """Seconds of an on-time event loop for a spent burst allowance to come back whole (none comes back
    while the loop runs late)."""
    endpoint_picker_model: str = ""
    """Also serve the Gateway API Inference Extension's endpoint-picker protocol (Envoy ext_proc, issue 34)
    for one InferencePool of this model: a standard gateway then asks this balancer where each call of
    the pool goes. Empty: not served."""
    endpoint_picker_pool_labels: Mapping[str, str] = field(default_factory=dict)
    """The labels of the pool's model-server pods: ``hetflow kube`` writes them as the InferencePool's
    selector (the balancer itself finds the servers through their engines' reports)."""
    endpoint_picker_target_port: int = 8000
    """The port the pool's model servers serve their OpenAI API on (the InferencePool's ``targetPorts``)."""
    redispatch_attempts: int = 2
    """How many more engines a call is sent to when its engine fails before the first token."""
    unreachable_skip_s: float = 5.0
    """How long this balancer skips an engine it failed to reach (the monitor keeps it unhealthy until
    it reports again)."""
    late_engine_max_s: float = 10.0
    """With no engine reporting on time, engines whose last report (saying they serve) is at most this
    old are still used."""
    rebuild_wait_s: float = 5.0
    """After the monitor restarts, calls are decided on its predecessor's last snapshot until the new one
    has heard from every engine that snapshot showed healthy, at most this long after the new monitor's
    first answer (the restart itself may take longer on a loaded host)."""
    monitor_probe_s: float = 1.0
    """How often the balancer asks the monitor for a snapshot when no call has (to notice a restart)."""
    workload_window_s: float = 300.0
    workload_sample: int = 50
    """The live workload the re-planner reads (``Workload``; Cascadia 4.4 samples 50 calls every 5
    minutes): the window and the calls sampled from it."""
    tokenizers: Mapping[str, str] = field(default_factory=dict)
    """Each served model's Hugging Face tokenizer directory (the one its vLLM server loads): a call's
    prompt tokens are then counted as its server counts them (``hetflow.runtime.model_tokenizer``; the
    largest count over the models), for KV room and the working sets. Empty: the approximate count
    (``hetflow.core.tokens``), which can be 15-20% off a model's (14-18% over on the live race's
    prompts, docs/vllm-sim.md), enough to hold new programs out of KV that would hold them. About 5 ms
    of the balancer's CPU per 4,000-token chat."""
    cascade: CascadeConfig | None = None
    """Serve every call without a model pin through a threshold cascade (Cascadia 3.3; ``hetflow plan``
    writes this section); None: no cascade."""
    serve: ServeConfig = field(default_factory=ServeConfig)

    def __post_init__(self) -> None:
        if self.past_deadline not in ("reject", "best-effort"):
            raise ValueError(f"balancer.past_deadline must be reject or best-effort, got {self.past_deadline!r}")
        if self.decide_burst_calls < 0 or self.decide_burst_refill_s <= 0:
            raise ValueError("balancer.decide_burst_calls must be >= 0 and balancer.decide_burst_refill_s > 0, got "
                             f"{self.decide_burst_calls} and {self.decide_burst_refill_s}")
        if self.accept_wait_target_s < 0 or self.accept_wait_interval_s <= 0:
            raise ValueError("balancer.accept_wait_target_s must be >= 0 and balancer.accept_wait_interval_s > 0, "
                             f"got {self.accept_wait_target_s} and {self.accept_wait_interval_s}")


def from_stack(raw: Mapping[str, Any]) -> BalancerConfig:
    defaults = stack_defaults(raw, "balancer")
    host = defaults["host"]
    for name in ("monitor", "router", "predictor"):
        section = raw.get(name, {})
        if "port" in section:
            defaults[f"{name}_address"] = f"{section.get('host', host)}:{section['port']}"
    section = dict(raw.get("balancer", {}))
    if "quantiles" in section:
        section["quantiles"] = tuple(section["quantiles"])
    if "policy" in section:
        section["policy"] = PolicyConfig.from_mapping(section["policy"])
        check_rl_policy(section["policy"], raw)
    if "cascade" in section:
        section["cascade"] = CascadeConfig.from_mapping(section["cascade"]) if section["cascade"] else None
    return service_config(BalancerConfig, section, "balancer", defaults)


def check_rl_policy(policy: PolicyConfig, raw: Mapping[str, Any]) -> None:
    """Refuse at start an ``rl-router`` policy file trained for engines this stack lacks (its state's rows
    and actions are instances, load-balancer paper 4.3); the picker itself refuses a damaged file."""
    if policy.engine.type != "rl-router" or not raw.get("engines"):
        return
    from hetflow.core.engine.profile import load_profile
    from hetflow.core.rl_router.policy_file import check_engines, load

    path = str(policy.engine.params.get("policy", ""))
    if not path:
        raise ValueError("balancer.policy: engine 'rl-router' needs engine_params.policy, a hetflow train rl file")
    models = {e["name"]: e.get("model") or load_profile(e["profile"]).model
              for e in raw["engines"] if "name" in e and (e.get("model") or e.get("profile"))}
    check_engines(load(Path(path)), models, path)
