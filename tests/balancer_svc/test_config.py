"""The default policy is the design card's; parameters left out follow the plugin they belong to."""

from hetflow.core.pipeline import Pipeline
from hetflow.core.policy_config import DEFAULT_STAGES, PolicyConfig


def test_the_default_is_the_design_cards_composition():
    policy = PolicyConfig()
    assert (policy.model, policy.engine, policy.priority) == ("chimera-slack", "memory-packer", "urgency")
    assert policy.engine_params == DEFAULT_STAGES["engine"][1] and policy.priority_params["default_slo_scale"] == 5.0
    assert Pipeline(policy).engine_picker.balanced is not None          # eq. 4 among the engines with room


def test_another_plugin_without_parameters_gets_its_own_defaults():
    policy = PolicyConfig(engine="least-load", priority="fcfs")
    assert policy.engine_params == {} and policy.priority_params == {}
    assert policy.model_params == DEFAULT_STAGES["model"][1]             # the untouched stage keeps the default's
    assert PolicyConfig(priority="urgency", priority_params={}).priority_params == {}
    Pipeline(policy)                                                      # builds: no stray parameter
