from pathlib import Path

import pytest

from balancer_svc.config import from_stack as balancer_config
from engine_svc.config import from_stack as engine_config
from hetflow.runtime.config import load_stack

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "local-sim.yaml"


def test_example_config_builds_every_service():
    raw = load_stack(EXAMPLE, environ={})
    b = balancer_config(raw)
    assert b.monitor_address == "127.0.0.1:50100" and b.policy.model.type == "chimera-slack"
    e = engine_config(raw, "large-0")
    assert e.serve.port == 50122 and e.monitor_address == "127.0.0.1:50100"


def test_the_example_spells_out_the_default_policy():
    from hetflow.core.policy_config import PolicyConfig
    from hetflow.core.presets import Preset, full_parameters

    spelled = balancer_config(load_stack(EXAMPLE, environ={})).policy
    assert full_parameters(Preset("example", "", spelled)) == full_parameters(Preset("default", "", PolicyConfig()))
    assert spelled.retention.params and spelled.reserve.type == "no-reserve"   # spelled out, not left to the default


def test_environment_overrides_sections_and_engines():
    raw = load_stack(EXAMPLE, environ={"HETFLOW__BALANCER__MAX_TOKENS_LIMIT": "64",
                                       "HETFLOW__ENGINES__SMALL_1__PORT": "6000"})
    assert balancer_config(raw).max_tokens_limit == 64
    assert engine_config(raw, "small-1").serve.port == 6000


def test_unknown_setting_is_named():
    raw = load_stack(EXAMPLE, environ={"HETFLOW__BALANCER__LATENCY_SLAK": "1"})
    with pytest.raises(ValueError, match="latency_slak"):
        balancer_config(raw)


def test_environment_overrides_reach_nested_fields():
    raw = load_stack(EXAMPLE, environ={"HETFLOW__BALANCER__POLICY__MODEL": "chimera-slack",
                                       "HETFLOW__BALANCER__POLICY__MODEL_PARAMS__LATENCY_SLACK": "0.5",
                                       "HETFLOW__ENGINES__LARGE_0__QUEUE__STARVATION_THRESHOLD": "7"})
    assert balancer_config(raw).policy.model.params["latency_slack"] == 0.5
    assert engine_config(raw, "large-0").queue.params["starvation_threshold"] == 7


@pytest.mark.parametrize("variable, named", [
    ("HETFLOW__BALANCR__PORT", "unknown section 'balancr'"),
    ("HETFLOW__ENGINES__LARGE_9__PORT", "no engine named 'large_9'"),
    ("HETFLOW__BALANCER__PORT__HOST", "port is 50110, not a section"),
    ("HETFLOW__BALANCER", "expected HETFLOW__<SECTION>__<FIELD>"),
])
def test_an_override_that_reaches_nothing_fails_loudly(variable, named):
    with pytest.raises(ValueError, match=named):
        load_stack(EXAMPLE, environ={variable: "1"})


def test_a_misspelled_section_is_named_with_a_suggestion(tmp_path):
    config = tmp_path / "stack.yaml"
    config.write_text("monitr: {port: 1}\nbalancer: {port: 2}\n")
    with pytest.raises(ValueError, match="'monitr' \\(did you mean 'monitor'\\?\\)"):
        load_stack(config, environ={})
