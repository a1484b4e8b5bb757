"""The decision-rate benchmark's stack: the example's services over 16 simulated engines, no gateway."""

from __future__ import annotations

from hetflow.bench.decision_rate import ENGINES, EXAMPLE, shared_context, stack_config
from hetflow.core.tokens import count_tokens
from hetflow.runtime.config import load_stack


def test_the_stack_has_sixteen_engines_of_the_examples_models_on_distinct_ports(tmp_path):
    raw = load_stack(stack_config(tmp_path), environ={})
    example = load_stack(EXAMPLE, environ={})
    assert len(raw["engines"]) == ENGINES and "gateway" not in raw
    assert {e["profile"] for e in raw["engines"]} == {e["profile"] for e in example["engines"]}
    services = [raw[s]["port"] for s in ("monitor", "router", "predictor", "balancer")]
    ports = services + [e["port"] for e in raw["engines"]]
    assert len(set(ports)) == len(ports)
    assert raw["balancer"]["policy"] == example["balancer"]["policy"]  # the example's default policy


def test_the_shared_context_is_about_as_long_as_asked_and_the_same_each_time():
    assert shared_context(0) == ""
    context = shared_context(2000)
    assert 2000 <= count_tokens(context) < 2100 and context == shared_context(2000)
