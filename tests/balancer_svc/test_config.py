"""The default policy is the design card's; a stage named without parameters runs its plugin's defaults."""

import pytest

from hetflow.core.pipeline import Pipeline
from hetflow.core.policy_config import PolicyConfig, StageConfig


def test_the_default_is_the_design_cards_composition():
    policy = PolicyConfig()
    assert ((policy.model.type, policy.engine.type, policy.priority.type)
            == ("chimera-slack", "memory-packer", "urgency"))
    assert (policy.engine.params == {"then": "workload-balanced"}
            and policy.priority.params == {"default_slo_scale": 5.0})
    pipeline = Pipeline(policy)
    assert pipeline.engine_picker.balanced is not None and pipeline.store.alpha == 0.0  # eq. 4 among engines with room


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
