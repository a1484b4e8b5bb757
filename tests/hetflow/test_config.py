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


def test_environment_overrides_sections_and_engines():
    raw = load_stack(EXAMPLE, environ={"HETFLOW__BALANCER__MAX_TOKENS_LIMIT": "64",
                                       "HETFLOW__ENGINES__SMALL_1__PORT": "6000"})
    assert balancer_config(raw).max_tokens_limit == 64
    assert engine_config(raw, "small-1").serve.port == 6000


def test_unknown_setting_is_named():
    raw = load_stack(EXAMPLE, environ={"HETFLOW__BALANCER__LATENCY_SLAK": "1"})
    with pytest.raises(ValueError, match="latency_slak"):
        balancer_config(raw)
