"""Balancer policies: small pure functions over a typed snapshot, one per file, chosen by name.

Five stages, run in this order, each a plugin kind of ``hetflow.core.plugins`` (STYLE.md; Gateway API
Inference Extension's endpoint picker):
  model-picker   ModelPicker.pick(call, snapshot, confidence, predictions, store) -> Choice
  engine-picker  EnginePicker.pick(call, snapshot, model, prediction, store)   -> Choice
  priority-rule  PriorityRule.priority(call, prediction, context)              -> (Priority, Choice)
  retention-rule RetentionRule.hold_s(call, context)                           -> (seconds, Choice)
  reserve-rule   ReserveRule.reserve_tokens(call, prediction, context)         -> (tokens, Choice)
The ``scored`` engine picker is itself filters, then weighted scorers, then the highest total:
  engine-filter  EngineFilter.keep(call, engines, snapshot, prediction)        -> engines
  engine-scorer  EngineScorer.score(call, engines, snapshot, prediction, store) -> {engine: 0..1}
The contracts every plugin implements are in ``hetflow.core.policies.contracts``; the built-in plugins
register when ``hetflow.core.policies.builtins`` is imported (``hetflow.core.plugins`` imports it when a
kind's plugins are first asked for), so no plugin module imports the registry of all of them.
"""
