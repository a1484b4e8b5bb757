"""The default policy is the one issue 12's capacity sweeps chose; a stage named without parameters runs
its plugin's defaults."""

import pytest

from hetflow.core.pipeline import Pipeline
from hetflow.core.policy_config import PolicyConfig, StageConfig


def test_the_default_is_the_slack_rule_the_working_set_gate_llm_d_scorers_and_stjf():
    policy = PolicyConfig()
    assert ((policy.model.type, policy.engine.type, policy.priority.type)
            == ("chimera-slack", "scored", "predicted-total-tokens"))
    assert policy.model.params == {"latency_slack": 0.0}
    pipeline = Pipeline(policy)
    assert [f.type_name for f in pipeline.engine_picker.filters] == ["working-set"]
    assert {s.type_name: w for s, w in pipeline.engine_picker.scorers} == {
        "queue": 2.0, "kv-utilization": 2.0, "prefix-affinity": 3.0}
    assert pipeline.engine_picker.reads_prefix and not pipeline.engine_picker.plans_memory


def test_a_stage_named_without_parameters_gets_its_plugins_defaults_not_the_defaults():
    policy = PolicyConfig.from_mapping({"engine": "memory-packer", "priority": "urgency"})
    assert policy.engine == StageConfig("memory-packer") and policy.priority == StageConfig("urgency")
    assert policy.model == PolicyConfig().model                         # the stage left out is the default's
    pipeline = Pipeline(policy)
    assert pipeline.engine_picker.then == "lowest-peak" and pipeline.store.alpha is None
    assert pipeline.priority_rule.default_slo_scale == 0.0


def test_parameters_alone_apply_to_the_default_plugin_and_round_trip():
    policy = PolicyConfig.from_mapping({"model_params": {"latency_slack": 1.0}})
    assert policy.model == StageConfig("chimera-slack", {"latency_slack": 1.0})
    assert PolicyConfig.from_mapping(policy.to_mapping()) == policy


def test_unknown_settings_and_parameters_are_named():
    with pytest.raises(ValueError, match="modle"):
        PolicyConfig.from_mapping({"modle": "chimera-slack"})
    with pytest.raises(ValueError, match="latency_slak"):
        Pipeline(PolicyConfig.from_mapping({"model_params": {"latency_slak": 1.0}}))
