"""Named scheduling policies, each a configuration of balancer_svc (model, priority and engine
stages) and engine_svc (queue discipline), run alike by the simulator and the live stack.

A spec is a name with optional parameter overrides of any stage that has the parameter:
``chimera:latency_slack=1.0``, ``hexgen:alpha=0.3``. ``apply_to_stack`` writes a preset into a stack
config.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from hetflow.core.policy_config import PolicyConfig


@dataclass(frozen=True)
class Preset:
    name: str
    source: str
    """Where the policy comes from: the paper and section."""
    policy: PolicyConfig
    queue_discipline: str = "priority"
    confidence: str = "router"
    """``router``: the router the run is given; ``prior``: fixed priors (the without-router ablation)."""
    prediction: str = "predictor"
    """``predictor``: the predictor the run is given; ``oracle``: the true lengths (simulator only)."""
    params: Mapping[str, Any] = field(default_factory=dict)


def _baseline(name: str, source: str, picker: str, priority: str = "fcfs", **kw: Any) -> Preset:
    return Preset(name, source, PolicyConfig(model=picker, model_params={}, priority=priority, engine=picker), **kw)


def _chimera(name: str, confidence: str) -> Preset:
    return Preset(name, "Chimera 3 (Algorithm 1, 3.6-3.7)" + ("; ablation without router" if confidence == "prior" else ""),
                  PolicyConfig(model="chimera-slack", model_params={"latency_slack": 0.5, "confidence_margin": 0.05},
                               priority="predicted-total-tokens", engine="least-inflight-tokens"),
                  confidence=confidence)


def _hexgen(name: str, source: str, engine: str, priority: str, model: str = "least-load",
            model_params: Mapping[str, Any] | None = None) -> Preset:
    engine_params = {"alpha": 0.0, "beta": 1.0} if engine == "workload-balanced" else {}
    return Preset(name, source, PolicyConfig(model=model, model_params=dict(model_params or {}), priority=priority,
                                             engine=engine, engine_params=engine_params))


def _kairos(name: str, source: str, priority: str, engine: str) -> Preset:
    return Preset(name, source, PolicyConfig(model="least-load", model_params={}, priority=priority, engine=engine))


PRESETS: dict[str, Preset] = {p.name: p for p in (
    _baseline("round-robin", "baseline", "round-robin"),
    _baseline("least-load", "vLLM's balancer as Chimera 4.2 describes it", "least-load"),
    _baseline("jsq", "join the shortest queue", "join-shortest-queue"),
    _baseline("mlfq", "MLFQ by attained service (FastServe), vLLM's balancer", "least-load", queue_discipline="mlfq"),
    _baseline("ltr", "LTR (Fu et al.): the call's own length, shortest first; the true length, LTR's upper bound",
              "least-load", priority="predicted-call-tokens", prediction="oracle"),
    _baseline("vllm-stjf", "Chimera 4.2's oracle: STJF on the true remaining tokens", "least-load",
              priority="predicted-total-tokens", prediction="oracle"),
    _chimera("chimera", "router"),
    _chimera("chimera-no-router", "prior"),
    _hexgen("hexgen", "HexGen-Flow 4.1-4.2: workload-balanced dispatch (eq. 2-4) and urgency (eq. 5-8); "
            "the model by vLLM's least load", "workload-balanced", "urgency"),
    _hexgen("hexgen-rr-pq", "HexGen-Flow 5.3 ablation: round robin + local priority queue", "round-robin", "urgency"),
    _hexgen("hexgen-wb-fcfs", "HexGen-Flow 5.3 ablation: workload-balanced + first come first served",
            "workload-balanced", "fcfs"),
    _kairos("kairos", "Kairos 5-6: agent priority by remaining-latency distributions (MDS), program start within "
            "an agent, and the memory-aware time-slot packer; the model by vLLM's least load",
            "agent-priority", "memory-packer"),
    _kairos("kairos-no-packing", "Kairos 7 ablation: without packing (round robin)", "agent-priority", "round-robin"),
    _kairos("kairos-no-priority", "Kairos 7 ablation: without priority (FCFS)", "fcfs", "memory-packer"),
    Preset("hetflow", "the design card's default: Chimera's slack rule; Kairos's memory packer deciding which "
           "engines have room and HexGen-Flow's eq. 4 choosing among them; HexGen-Flow's urgency (calls without a "
           "deadline get 5x their remaining cost), with aging",
           PolicyConfig()),
    _hexgen("chimera-hexgen", "Chimera's slack rule, then HexGen-Flow's workload-balanced engine and urgency",
            "workload-balanced", "urgency", model="chimera-slack",
            model_params={"latency_slack": 0.5, "confidence_margin": 0.05}),
)}


def resolve(spec: str) -> Preset:
    """``name`` or ``name:key=value,key=value`` (overrides of the model stage's parameters)."""
    name, _, overrides = spec.partition(":")
    if name not in PRESETS:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(PRESETS)}")
    preset = PRESETS[name]
    if not overrides:
        return preset
    p = preset.policy
    stages = {"model_params": dict(p.model_params), "engine_params": dict(p.engine_params),
              "priority_params": dict(p.priority_params)}
    params = {}
    for item in overrides.split(","):
        key, sep, value = item.partition("=")
        owner = next((stage for stage, values in stages.items() if key in values), None)
        if not sep or owner is None:
            known = sorted(k for values in stages.values() for k in values)
            raise ValueError(f"policy {spec!r}: {key!r} is not a parameter of {name} (has {known})")
        stages[owner][key] = params[key] = float(value)
    return replace(preset, name=spec, policy=replace(p, **stages), params=params)


def apply_to_stack(raw: Mapping[str, Any], preset: Preset) -> dict[str, Any]:
    """A copy of the stack config whose balancer and engines run ``preset``."""
    if preset.prediction == "oracle":
        raise ValueError(f"policy {preset.name!r} needs the true lengths: it runs in the simulator only")
    out = copy.deepcopy(dict(raw))
    p = preset.policy
    out.setdefault("balancer", {})["policy"] = {
        "model": p.model, "model_params": dict(p.model_params), "priority": p.priority,
        "priority_params": dict(p.priority_params), "engine": p.engine, "engine_params": dict(p.engine_params)}
    for engine in out.get("engines", []):
        engine.setdefault("queue", {})["discipline"] = preset.queue_discipline
    if preset.confidence == "prior":
        out.setdefault("router", {})["kind"] = "fixed-prior"
    return out
