"""The balancer's decision as a pure function: model -> engine -> priority.

balancer_svc's dispatcher and the virtual-time simulator run this same code; it reads only what it is
given (the call, a snapshot, router confidences, predictions) and never yields, so a caller can make
it atomic with respect to other decisions. What persists between decisions is the pipeline's
``PolicyStore`` (HexGen-Flow's tunable alpha, rotation turns).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Mapping

from hetflow.core import plugins
from hetflow.core.call import LlmCall
from hetflow.core.errors import NotFound, ResourceExhausted, Unavailable
from hetflow.core.monitor.memory_ledger import MemoryPlan
from hetflow.core.policies.contracts import (
    Choice,
    EnginePicker,
    FinishedCall,
    ModelPicker,
    PolicyStore,
    Prediction,
    Priority,
    PriorityContext,
    PriorityRule,
    ReserveRule,
    RetentionRule,
    WaitForCapacity,
)
from hetflow.core.policies.memory_packer import plan_for
from hetflow.core.policy_config import PolicyConfig
from hetflow.core.room import WorkingSetRoom
from hetflow.core.snapshot import ClusterSnapshot, snapshot_with


@dataclass
class StageDecision:
    """One stage's part of a decision, for the receipt."""

    stage: str
    plugin: str
    choice: Choice
    elapsed_ms: float


@dataclass(frozen=True)
class _Timed:
    choice: Choice
    elapsed_ms: float


@dataclass
class Decision:
    model: str
    engine_id: str
    priority: Priority
    prediction: Prediction
    stages: list[StageDecision] = field(default_factory=list)
    predicted_cost_s: float = 0.0
    """t_comp of the call on the chosen engine (HexGen-Flow eq. 2), which the monitor sums into t_queue."""
    memory_plan: MemoryPlan | None = None
    """The call's expected KV use over time (Kairos eq. 1-2), for the engine's ledger; None unless the
    engine picker packs memory."""
    mean_cost_s: float = 0.0
    """t-bar_comp of the call over all instances (HexGen-Flow eq. 6), from which the monitor learns its
    stage's mean cost for later calls' budgets (eq. 5)."""
    retain_kv_s: float | None = None
    """How long the engine keeps the program's KV after the call finishes (the retention stage; issue 35);
    None: the retention stage decides no hold (``RetentionRule.hold_s``), and the engine frees it at once."""
    reserve_output_tokens: int = 0
    """Output tokens the engine keeps KV room for while the call runs (the reserve stage; issue 35)."""
    working_set_room: WorkingSetRoom | None = None
    """The working-set room the engine choice assumed, which the monitor checks again at admit
    (``hetflow.core.room``); None: none to check."""


def models_able_to_hold(call: LlmCall, snapshot: ClusterSnapshot, models: list[str]) -> list[str]:
    """The models with a healthy engine whose KV could ever hold the call (prompt + max_tokens): a call
    one model's engines can hold is never refused because another's cannot. None: UNAVAILABLE while an
    unhealthy engine could hold it, else RESOURCE_EXHAUSTED without a retry hint (never)."""
    needed = call.input_tokens + call.sampling.max_tokens
    able = [m for m in models if any(needed <= e.kv_capacity_tokens for e in snapshot.healthy_engines(m))]
    if not able:
        down = [e for e in snapshot.engines if not e.healthy and needed <= e.kv_capacity_tokens]
        if down:  # not never: once it is back (a refusal without a retry hint is one nobody retries)
            raise Unavailable(f"call needs {needed} KV tokens; only {down[0].engine_id} ({down[0].model}), unhealthy "
                              "now, holds that many")
        largest = max(snapshot.healthy_engines(), key=lambda e: e.kv_capacity_tokens)
        raise ResourceExhausted(f"call needs {needed} KV tokens (prompt {call.input_tokens} + max_tokens "
                                f"{call.sampling.max_tokens}); the largest engine, {largest.engine_id} "
                                f"({largest.model}), holds {largest.kv_capacity_tokens}")
    return able


def serving(snapshot: ClusterSnapshot, models: list[str]) -> ClusterSnapshot:
    """``snapshot`` with only the engines of ``models`` (the call's candidates, ``candidate_models``):
    what the model picker, or an engine-first engine stage, chooses among, so that neither picks a model
    the predictor was not asked about."""
    return snapshot_with(snapshot, engines=tuple(e for e in snapshot.engines if e.model in models))


class Pipeline:
    def __init__(self, policy: PolicyConfig, tells_completions: bool = False) -> None:
        """``tells_completions``: the caller calls ``finished`` for every call it placed (the simulator); an
        engine picker that learns from completions runs only then."""
        self.model_picker: ModelPicker = plugins.build("model-picker", policy.model.type, policy.model.params)
        self.engine_picker: EnginePicker = plugins.build("engine-picker", policy.engine.type, policy.engine.params)
        if self.engine_picker.follows_completions and not tells_completions:
            raise ValueError(f"engine picker {policy.engine.type!r} learns from finished calls, which only the "
                             "simulator tells it: it runs in the simulator only")
        self.priority_rule: PriorityRule = plugins.build("priority-rule", policy.priority.type,
                                                         policy.priority.params)
        self.retention_rule: RetentionRule = plugins.build("retention-rule", policy.retention.type,
                                                           policy.retention.params)
        self.reserve_rule: ReserveRule = plugins.build("reserve-rule", policy.reserve.type, policy.reserve.params)
        self.store = PolicyStore(alpha=self.engine_picker.initial_alpha)

    def candidate_models(self, call: LlmCall, snapshot: ClusterSnapshot) -> list[str]:
        """The models this call may go to: its pin, its program's model (when the model picker keeps
        program affinity), or every healthy one."""
        if call.model_pin:
            if call.model_pin not in snapshot.models():
                raise NotFound(f"model_pin {call.model_pin!r} is not served; models: {snapshot.models()}")
            if not snapshot.healthy_engines(call.model_pin):
                raise Unavailable(f"no healthy engine for model {call.model_pin!r}")
            return [call.model_pin]
        healthy = snapshot.healthy_models()
        if not healthy:
            raise Unavailable("no healthy engine serves any model")
        able = models_able_to_hold(call, snapshot, healthy)
        if self.model_picker.program_affinity and snapshot.program_model in able:
            return [snapshot.program_model]
        return able

    def finished(self, call: FinishedCall) -> None:
        """A call this pipeline placed has finished: the engine picker learns from it. Only a caller that
        tells completions calls it, and only for a picker that follows them (``follows_completions``)."""
        self.engine_picker.finished(call, self.store)

    def needs_router(self, call: LlmCall, candidates: list[str], view: ClusterSnapshot | None = None) -> bool:
        """Whether the model stage reads the router's confidences for ``call`` among ``candidates``; with
        ``view`` (the engines as the decision sees them), only when they can change its pick there."""
        return not call.model_pin and len(candidates) > 1 and self.model_picker.needs_router and (
            view is None or self.model_picker.reads_confidence(call, serving(view, candidates)))

    def decide(self, call: LlmCall, view: ClusterSnapshot, candidates: list[str], confidence: Mapping[str, float],
               predictions: Mapping[str, tuple[Prediction, str]], router_asked: bool,
               prompt_truncated: bool = False) -> Decision:
        """``candidates``: ``candidate_models(call, view)``, which the caller took to ask the router and the
        predictor about them; ``predictions`` holds one for each."""
        if self.model_picker.engine_first and not call.model_pin:
            stages, engine_choice = self._engine_first(call, view, candidates, predictions)
            model = stages[0].choice.chosen
        else:
            stages = [self._model_stage(call, serving(view, candidates), confidence,
                                        {m: p for m, (p, _) in predictions.items()}, router_asked)]
            model = stages[0].choice.chosen
            engine_choice = self._engine_stage(call, view, model, predictions[model][0])
        if prompt_truncated:  # the encoder saw only the first max_length tokens of the prompt
            stages[0].choice = _noted(stages[0].choice, "router-prompt-truncated")
        stages.append(StageDecision("engine", self.engine_picker.type_name, engine_choice.choice,
                                    engine_choice.elapsed_ms))
        engine = next(e for e in view.engines if e.engine_id == engine_choice.choice.chosen)
        prediction, predictor_note = predictions[model]

        t = time.perf_counter()
        context = PriorityContext.for_call(call, prediction, view.taken_unix_s, engine, view)
        priority, priority_choice = self.priority_rule.priority(call, prediction, context)
        if predictor_note:
            priority_choice = _noted(priority_choice, predictor_note)
        if call.workflow.deadline_missed:
            priority_choice = _noted(priority_choice, "deadline-passed:best-effort")
        stages.append(StageDecision("priority", self.priority_rule.type_name, priority_choice,
                                    (time.perf_counter() - t) * 1e3))
        t = time.perf_counter()
        retain_kv_s, retention_choice = self.retention_rule.hold_s(call, context)
        stages.append(StageDecision("retention", self.retention_rule.type_name, retention_choice,
                                    (time.perf_counter() - t) * 1e3))
        t = time.perf_counter()
        reserve_tokens, reserve_choice = self.reserve_rule.reserve_tokens(call, prediction, context)
        stages.append(StageDecision("reserve", self.reserve_rule.type_name, reserve_choice,
                                    (time.perf_counter() - t) * 1e3))
        plan = (plan_for(call, engine, view.agent_expected_s, context.output_tokens)
                if self.engine_picker.plans_memory else None)
        return Decision(model, engine.engine_id, priority, prediction, stages, context.compute_cost_s, plan,
                        context.mean_cost_s, retain_kv_s, reserve_tokens,
                        self.engine_picker.admit_room(call, engine, view, prediction))

    def _model_stage(self, call: LlmCall, view: ClusterSnapshot, confidence: Mapping[str, float],
                     predictions: Mapping[str, Prediction], router_asked: bool) -> StageDecision:
        t = time.perf_counter()
        if call.model_pin:
            return StageDecision("model", "model-pin", Choice(call.model_pin, "model-pin"), 0.0)
        choice = self.model_picker.pick(call, view, confidence, predictions, self.store)
        if router_asked and not confidence:
            choice = _noted(choice, "router-unavailable")
        return StageDecision("model", self.model_picker.type_name, choice, (time.perf_counter() - t) * 1e3)

    def _engine_stage(self, call: LlmCall, view: ClusterSnapshot, model: str, prediction: Prediction) -> _Timed:
        """The engine picker's choice among ``model``'s engines ("" for every candidate's); a call no
        engine has room for now is held, at its priority on the model."""
        t = time.perf_counter()
        try:
            choice = self.engine_picker.pick(call, view, model, prediction, self.store)
        except WaitForCapacity as wait:  # held: its place in the hold queue is its priority on the model
            raise WaitForCapacity(str(wait), wait.retry_after_s,
                                  self._priority_on(call, view, model, prediction)) from wait
        return _Timed(choice, (time.perf_counter() - t) * 1e3)

    def _engine_first(self, call: LlmCall, view: ClusterSnapshot, candidates: list[str],
                      predictions: Mapping[str, tuple[Prediction, str]]) -> tuple[list[StageDecision], _Timed]:
        """The engine stage over every candidate model's engines; the model is the chosen engine's."""
        timed = self._engine_stage(call, serving(view, candidates), "", predictions[candidates[0]][0])
        model = next(e.model for e in view.engines if e.engine_id == timed.choice.chosen)
        return [StageDecision("model", self.model_picker.type_name, Choice(model, "engine-first"), 0.0)], timed

    def _priority_on(self, call: LlmCall, view: ClusterSnapshot, model: str, prediction: Prediction) -> Priority:
        """The call's priority as if it went to the model's first healthy engine (by id)."""
        engine = min(view.healthy_engines(model or None), key=lambda e: e.engine_id)
        context = PriorityContext.for_call(call, prediction, view.taken_unix_s, engine, view)
        return self.priority_rule.priority(call, prediction, context)[0]


def _noted(choice: Choice, note: str) -> Choice:
    return replace(choice, rule=f"{note};{choice.rule}")
