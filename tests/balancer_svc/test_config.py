"""The default policy is the one issue 35's capacity sweeps chose; a stage named without parameters runs
its plugin's defaults."""

import pytest

from balancer_svc.config import BalancerConfig
from hetflow.core.pipeline import Pipeline
from hetflow.core.policy_config import PolicyConfig, StageConfig


def test_the_default_is_issue_35s_composition_with_codes_confirmed_model_stage():
    policy = PolicyConfig()
    assert ((policy.model.type, policy.engine.type, policy.priority.type, policy.retention.type, policy.reserve.type)
            == ("chimera-slack", "scored", "program-remaining-work", "workflow-ttl", "no-reserve"))
    assert policy.model.params == {"latency_slack": 0.0, "open_slots_first": True,
                                   "per_workflow": {"code": {"latency_slack": 1.0, "margin_per_ktoken": 0.4}}}
    pipeline = Pipeline(policy)
    assert [f.type_name for f in pipeline.engine_picker.filters] == ["working-set"]
    assert pipeline.engine_picker.filters[0].resume_where_fits
    assert {s.type_name: w for s, w in pipeline.engine_picker.scorers} == {
        "queue": 2.0, "kv-utilization": 2.0, "program-affinity": 3.0, "spread-prefix-affinity": 3.0}
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


def _stack_with_rl_policy(policy_path, engine_names=("large-0", "large-1")):
    return {"balancer": {"policy": {"engine": "rl-router", "engine_params": {"policy": str(policy_path)}}},
            "engines": [{"name": n, "profile": "qwen2.5-7b-instruct@l4"} for n in engine_names]}


def _rl_policy_file(tmp_path, engines):
    from hetflow.core.rl_router.decode_bucket import DQN_BUCKETS
    from hetflow.core.rl_router.dqn import QNetwork
    from hetflow.core.rl_router.policy_file import RlPolicy, save
    from hetflow.core.rl_router.state import state_dim

    net = QNetwork(state_dim(len(engines), DQN_BUCKETS), len(engines) + 1, 8)
    save(RlPolicy(tuple(engines), "qwen2.5-7b-instruct", DQN_BUCKETS, 0.07, 32768, 8, net.state_dict()),
         tmp_path / "rl.pt")
    return tmp_path / "rl.pt"


def test_an_rl_router_policy_for_the_stacks_engines_is_taken_and_one_for_other_engines_is_refused_at_start(tmp_path):
    from balancer_svc.config import from_stack

    path = _rl_policy_file(tmp_path, ["large-0", "large-1"])
    assert from_stack(_stack_with_rl_policy(path)).policy.engine.params == {"policy": str(path)}
    with pytest.raises(ValueError, match="large-1 is not in the stack"):
        from_stack(_stack_with_rl_policy(path, ("large-0", "large-9")))
    (tmp_path / "rl.pt").write_bytes(b"corrupted")
    with pytest.raises(ValueError, match="cannot be read"):
        from_stack(_stack_with_rl_policy(path))


@pytest.mark.parametrize("setting", [{"decide_burst_calls": -1}, {"decide_burst_refill_s": 0.0}])
def test_a_burst_allowance_needs_a_size_and_a_refill_time(setting):
    with pytest.raises(ValueError, match="decide_burst"):
        BalancerConfig(**setting)
