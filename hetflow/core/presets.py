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

from hetflow.core import plugins
from hetflow.core.policy_config import STAGES, PolicyConfig, StageConfig


@dataclass(frozen=True)
class Preset:
    name: str
    source: str
    """Where the policy comes from: the paper and section."""
    policy: PolicyConfig
    queue_discipline: str = "priority"
    confidence: str = "router"
    """``router``: the router the run is given, each model's sigmoid as it is (Chimera 3.3);
    ``router-one-difficulty``: the same router read through one difficulty per prompt
    (``hetflow.core.confidence``; a learned router's reading, the identity on fixed priors and not applied
    to an oracle); ``prior``: fixed priors (the without-router ablation); one of ``ORACLE_ROUTERS``: the
    trace's own knowledge of each call's answer (simulator only)."""
    prediction: str = "predictor"
    """``predictor``: the predictor the run is given; ``oracle``: the true lengths (simulator only)."""
    params: Mapping[str, Any] = field(default_factory=dict)


ORACLE_ROUTERS = ("oracle", "probability", "visible-probability")
"""Confidences only a simulated trace can give (``simulator.signals``): each call's sampled outcome, the
probability it was drawn with, and that probability from what the prompt shows: a router's ceilings."""
CONFIDENCES = ("router", "router-one-difficulty", "prior", *ORACLE_ROUTERS)
READING_OF = {"router": "per-model", "router-one-difficulty": "one-difficulty"}
"""The router's ``reading`` (``hetflow.core.confidence.READINGS``) each router confidence runs it with."""
PREDICTIONS = ("predictor", "oracle")


def _policy(model: str | StageConfig, engine: str | StageConfig, priority: str | StageConfig) -> PolicyConfig:
    """Every stage spelled out: a bare name runs that plugin with its own defaults; no retention (KV freed
    at a call's end) and no reserve (hetflow's default retains)."""
    def stage(s: str | StageConfig) -> StageConfig:
        return s if isinstance(s, StageConfig) else StageConfig(s)

    return PolicyConfig(model=stage(model), engine=stage(engine), priority=stage(priority),
                        retention=StageConfig("free-at-finish"), reserve=StageConfig("no-reserve"))


def _baseline(name: str, source: str, picker: str, priority: str = "fcfs", **kw: Any) -> Preset:
    return Preset(name, source, _policy(picker, picker, priority), **kw)


def _load_balancer(name: str, source: str, engine: str | StageConfig) -> Preset:
    """One of the load-balancer paper's engine choices, among replicas of one model (its setting): the
    model by vLLM's least load, FCFS."""
    return Preset(name, "load-balancer paper " + source, _policy("least-load", engine, "fcfs"))


def _chimera(name: str, confidence: str) -> Preset:
    return Preset(name,
                  "Chimera 3 (Algorithm 1, 3.6-3.7)" + ("; ablation without router" if confidence == "prior" else ""),
                  _policy("chimera-slack", "least-inflight-tokens", "predicted-total-tokens"), confidence=confidence)


def _hexgen(name: str, source: str, engine: str, priority: str) -> Preset:
    """HexGen-Flow's engine and priority stages; the model by vLLM's least load."""
    return Preset(name, source, _policy("least-load", engine, priority))


def _kairos(name: str, source: str, priority: str, engine: str) -> Preset:
    return Preset(name, source, _policy("least-load", engine, priority))


LLM_D_ENGINE = StageConfig("scored", {"scorers": {"queue": 2.0, "kv-utilization": 2.0, "prefix-affinity": 3.0}})
"""llm-d's default profile: its three scorers and weights, no filter."""
GATED_ENGINE = StageConfig("scored", {"filters": ["working-set"], "scorers": {
    "queue": 2.0, "kv-utilization": 2.0, "prefix-affinity": 3.0}})
"""llm-d's scorers behind hetflow's program-level gate on KV working sets."""
FIRST_SWEEPS_DEFAULT = _policy(StageConfig("chimera-slack", {"latency_slack": 0.0}), GATED_ENGINE,
                               "predicted-total-tokens")
"""hetflow's default from issue 12 to issue 35 (docs/history/results-log.md, "Issue 12")."""

KIND_OF_STAGE = {"model": "model-picker", "engine": "engine-picker", "priority": "priority-rule",
                 "retention": "retention-rule", "reserve": "reserve-rule"}

PRESETS: dict[str, Preset] = {p.name: p for p in (
    _baseline("round-robin", "baseline", "round-robin"),
    _baseline("least-load", "vLLM 0.32's data-parallel load balancer (DPLBAsyncMPClient), FCFS", "least-load"),
    _baseline("jsq", "join the shortest queue", "join-shortest-queue"),
    _baseline("mlfq", "Chimera 4.2's MLFQ baseline: vLLM with levels by attained service, demotion and promotion "
              "(after FastServe, without its skip-join or preemption at quantum ends); vLLM's load balancer",
              "least-load", queue_discipline="mlfq"),
    _baseline("ltr", "LTR (Fu et al.): the call's own length, shortest first; the true length, LTR's upper bound",
              "least-load", priority="predicted-call-tokens", prediction="oracle"),
    _baseline("vllm-stjf", "Chimera 4.2's oracle: STJF on the true remaining tokens", "least-load",
              priority="predicted-total-tokens", prediction="oracle"),
    _load_balancer("max-capacity", "C.3.2: maximum capacity usage, the engine with the most free KV that can take "
                   "the request, retried each second while none can", "max-capacity"),
    _load_balancer("max-capacity-reserved", "C.3.2 with the RL router's room rule (room counted against what the "
                   "in-flight calls will hold at their end) and its 0.02 s step: the heuristic the RL router learns "
                   "from", StageConfig("max-capacity", {"room": "reserved", "retry_s": 0.02})),
    _load_balancer("min-min", "C.3.3: min-min, the engine where the request would finish first", "min-min"),
    _load_balancer("least-work-left", "C.3.1: the engine with the fewest prompt and decode tokens yet to process",
                   "work-left-tokens"),
    _load_balancer("decode-balancer", "C.2.6: the engine with the fewest in-flight decode tokens",
                   "least-inflight-tokens"),
    _load_balancer("dedicated-small-large", "C.2.4: heavy-decode requests on half the engines, light ones on the "
                   "other half", "dedicated-small-large"),
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
    Preset("hetflow", "hetflow's default, chosen from the capacity sweeps: Chimera's slack rule with no "
           "slack among the models with a free batch slot, the working-set gate with resumes kept where their "
           "context fits, the queue, KV, program-affinity and spread-prefix-affinity scorers, the program's remaining "
           "work on its critical path with aging, workflow-aware KV retention; on code, slack 1 and a margin "
           "of 0.4 per 1,000 predicted tokens with the router read through one difficulty (confirmed on "
           "held-out seeds: confirm-code-kappa.yaml)",
           PolicyConfig(), confidence="router-one-difficulty"),
    Preset("hetflow-no-retention", "the first sweeps' default, the baseline of the KV-retention figures: "
           "Chimera's slack rule with no slack, the working-set gate, llm-d's engine scorers, Chimera's STJF "
           "priority with aging, no retention and no reserve", FIRST_SWEEPS_DEFAULT),
    Preset("hetflow-card", "the design card's composition (hetflow's default before the first sweeps): Chimera's "
           "slack rule; "
           "Kairos's memory packer deciding which engines have room and HexGen-Flow's eq. 4 choosing among them; "
           "HexGen-Flow's urgency (calls without a deadline get 5x their remaining cost), with aging",
           _policy("chimera-slack", StageConfig("memory-packer", {"then": "workload-balanced"}),
                   StageConfig("urgency", {"default_slo_scale": 5.0}))),
    Preset("llm-d", "llm-d's default scheduling profile (Gateway API Inference Extension endpoint picker): queue x2, "
           "KV utilization x2, prefix cache x3, max score (llm-d-inference-scheduler pkg/epp/config/loader/"
           "defaults.go); FCFS engines", _policy("engine-first", LLM_D_ENGINE, "fcfs")),
    Preset("sglang", "SGLang's cache-aware router with its launcher's defaults (sgl-model-gateway "
           "src/policies/cache_aware.rs, router_args.py); FCFS engines",
           _policy("engine-first", "cache-aware", "fcfs")),
    Preset("dynamo", "NVIDIA Dynamo's KV router cost, overlap weight 1, temperature 0 (ai-dynamo/dynamo "
           "lib/llm/src/kv_router/scheduler.rs); FCFS engines", _policy("engine-first", "kv-overlap-cost", "fcfs")),
    Preset("autellix", "Autellix 4.2-4.3: ATLAS (program-level attained service on the critical path, eq. 2) and "
           "its data-locality balancer (Algorithm 2, long prompts over 2048 tokens stay on the program's engine)",
           _policy("engine-first", "program-locality", "attained-service")),
    Preset("vllm-router-program", "vLLM's router 0.1.17 with Program scheduling as its docs recommend (global "
           "queue, token capacity = the engines' KV, cost models fitted to their profile): programs admitted by KV "
           "tokens with a growth reserve, KV kept across tool calls for a fitted TTL, resume on the program's rank "
           "(vllm-project/router src/program_scheduling, docs/program_scheduling.md); FCFS engines; simulator only",
           _policy("engine-first", "program-admission", "fcfs")),
    Preset("autellix-plas", "Autellix 4.2.1: PLAS (program-level attained service, eq. 1) and its data-locality "
           "balancer", _policy("engine-first", "program-locality", StageConfig("attained-service",
                                                                               {"variant": "plas"}))),
    Preset("vllm-router-cache-aware", "vLLM's router 0.1.17 through its default door, --policy cache_aware with "
           "its launcher's defaults (0.3, 64, 1.5), the least loaded among the best matches "
           "(vllm-project/router src/policies/cache_aware.rs); requests without agentic_context take it; FCFS "
           "engines", _policy("engine-first", StageConfig("cache-aware", {"best_match_tiebreak": "least-load"}),
                              "fcfs")),
    Preset("vllm-router-power-of-two", "vLLM's router 0.1.17, --policy power_of_two: the less loaded of two random "
           "workers by in-flight requests (src/policies/power_of_two.rs), its docs' door for variable request "
           "complexity; FCFS engines", _policy("engine-first", "power-of-two", "fcfs")),
    Preset("vllm-router-consistent-hash", "vLLM's router 0.1.17, --policy consistent_hash on the x-session-id "
           "header (src/policies/consistent_hash.rs, hash_key.rs), its docs' door for multi-turn sessions and KV "
           "reuse; FCFS engines", _policy("engine-first", "consistent-hash", "fcfs")),
    Preset("semantic-router", "vLLM's Semantic Router: the request's category's highest-scored model, else the best "
           "average performer (pkg/classification/classifier.go, pkg/selection/static.go), Envoy's round robin "
           "among its replicas; FCFS engines",
           _policy("semantic-router", "round-robin", "fcfs"), confidence="prior"),
)}

RIVALS_ENGINE_FIRST = ("llm-d", "sglang", "dynamo", "autellix", "vllm-router-program", "vllm-router-cache-aware",
                       "vllm-router-power-of-two", "vllm-router-consistent-hash")
"""The rivals that route engines, not models: each also as ``<name>-per-model``."""


def _per_model(preset: Preset) -> Preset:
    """``preset`` deployed with one pool per model: the client names the model (``named-pool``, each model's
    share of programs its share of the pool's decode rate) and the rival routes among that model's engines."""
    return replace(preset, name=f"{preset.name}-per-model",
                   source=f"{preset.source}; one pool per model, the model named by the client in proportion to "
                          "each pool's decode rate",
                   policy=replace(preset.policy, model=StageConfig("named-pool")))


PRESETS.update({p.name: p for p in (_per_model(PRESETS[name]) for name in RIVALS_ENGINE_FIRST)})


def define(raw: Mapping[str, Any], source: str) -> Preset:
    """A composition named in configuration (a sweep's ``policies`` entry): ``name``, the stages as in a
    stack's ``balancer.policy``, ``queue`` (the engine queue's discipline), ``confidence``
    (``CONFIDENCES``) and ``prediction`` (``PREDICTIONS``); or ``base``, a preset whose stages, queue,
    confidence and prediction it keeps where it names none. It must not reuse a built-in preset's name;
    the same definition twice is the same preset."""
    fields = dict(raw)
    name = str(fields.pop("name", ""))
    if not name or ":" in name:
        raise ValueError(f"{source}: a defined policy needs a name without ':', got {name!r}")
    base = resolve(str(fields.pop("base"))) if "base" in fields else None
    queue = str(fields.pop("queue", base.queue_discipline if base else "priority"))
    confidence = str(fields.pop("confidence", base.confidence if base else "router"))
    if confidence not in CONFIDENCES:
        raise ValueError(f"{source}: policy {name!r}: confidence is one of {', '.join(CONFIDENCES)}, "
                         f"got {confidence!r}")
    prediction = str(fields.pop("prediction", base.prediction if base else "predictor"))
    if prediction not in PREDICTIONS:
        raise ValueError(f"{source}: policy {name!r}: prediction is one of {', '.join(PREDICTIONS)}, "
                         f"got {prediction!r}")
    stages = _on_base(base, fields) if base else fields
    preset = Preset(name, f"defined in {source}" + (f" on {base.name}" if base else ""),
                    PolicyConfig.from_mapping(stages), queue_discipline=queue, confidence=confidence,
                    prediction=prediction)
    for stage in STAGES:
        config: StageConfig = getattr(preset.policy, stage)
        plugins.build(KIND_OF_STAGE[stage], config.type, config.params)  # fail before anything runs
    existing = PRESETS.get(name)
    if existing is not None:
        if ((existing.policy, existing.queue_discipline, existing.confidence, existing.prediction)
                != (preset.policy, preset.queue_discipline, preset.confidence, preset.prediction)):
            raise ValueError(f"{source}: policy {name!r} is already defined differently")
        return existing
    PRESETS[name] = preset
    return preset


def _on_base(base: Preset, fields: Mapping[str, Any]) -> dict[str, Any]:
    """``base``'s stages with those ``fields`` names replaced (a stage named without its parameters takes its
    plugin's defaults, not the base plugin's parameters)."""
    stages = base.policy.to_mapping()
    for stage in STAGES:
        if stage in fields:
            stages.pop(f"{stage}_params")
    return {**stages, **fields}


def resolve(spec: str) -> Preset:
    """``name`` or ``name:key=value,key=value``: overrides of a parameter of whichever stage's plugin takes it."""
    name, _, overrides = spec.partition(":")
    if name not in PRESETS:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(PRESETS)}")
    preset = PRESETS[name]
    if not overrides:
        return preset
    policy, params = preset.policy, {}
    accepted = {stage: plugins.defaults(KIND_OF_STAGE[stage], getattr(policy, stage).type) for stage in STAGES}
    for item in overrides.split(","):
        key, sep, value = item.partition("=")
        owners = [stage for stage in STAGES if key in accepted[stage]]
        if not sep or len(owners) != 1:
            known = sorted(k for values in accepted.values() for k in values)
            raise ValueError(f"policy {spec!r}: {key!r} is not a parameter of one stage of {name} (has {known})")
        policy = policy.with_params(owners[0], **{key: _parsed(value)})
        params[key] = _parsed(value)
    return replace(preset, name=spec, policy=policy, params=params)


def split_specs(text: str) -> list[str]:
    """Comma-separated policy specs (``resolve``), where a spec may itself list overrides with commas:
    ``llm-d,vllm-router-program:session_header=true,max_active_programs=256`` is two specs, since a
    ``key=value`` with no ``:`` before its ``=`` continues the spec before it."""
    specs: list[str] = []
    for item in text.split(","):
        key = item.partition("=")[0]
        if specs and "=" in item and ":" not in key and ":" in specs[-1]:
            specs[-1] += "," + item
        else:
            specs.append(item)
    return specs


def _parsed(value: str) -> Any:
    """An override's value: true/false as booleans (a plugin's ``bool("false")`` would be True), numbers as
    floats, anything else as given."""
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    try:
        return float(value)
    except ValueError:
        return value


def full_parameters(preset: Preset) -> dict[str, tuple[str, dict[str, Any]]]:
    """Every stage's plugin with every parameter it runs with, configured or default, and the engine
    queue's: what a run of the preset really does."""
    out = {}
    for stage in STAGES:
        config: StageConfig = getattr(preset.policy, stage)
        out[stage] = (config.type, {**plugins.defaults(KIND_OF_STAGE[stage], config.type), **config.params})
    out["queue"] = (preset.queue_discipline, plugins.defaults("engine-queue", preset.queue_discipline))
    return out


def apply_to_stack(raw: Mapping[str, Any], preset: Preset) -> dict[str, Any]:
    """A copy of the stack config whose balancer and engines run ``preset``."""
    if preset.prediction == "oracle" or preset.confidence in ORACLE_ROUTERS:
        raise ValueError(f"policy {preset.name!r} needs what only a simulated trace knows (true lengths or "
                         "answers): it runs in the simulator only")
    if getattr(plugins.plugin_class("engine-picker", preset.policy.engine.type), "follows_completions", False):
        raise ValueError(f"policy {preset.name!r} learns from finished calls: it runs in the simulator only (live, "
                         "run the rival itself: python -m hetflow.bench.doors)")
    out = copy.deepcopy(dict(raw))
    out.setdefault("balancer", {})["policy"] = preset.policy.to_mapping()
    for engine in out.get("engines", []):
        engine.setdefault("queue", {})["discipline"] = preset.queue_discipline
    if preset.confidence == "prior":
        out.setdefault("router", {})["kind"] = "fixed-prior"
    elif preset.confidence in READING_OF:
        out.setdefault("router", {})["reading"] = READING_OF[preset.confidence]
    return out
