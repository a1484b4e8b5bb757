"""What the simulated balancer is told: the oracle routers read the trace's knowledge of each answer."""

import pytest

from hetflow.core.presets import ORACLE_ROUTERS
from hetflow.workloads.generate import generate
from simulator.signals import CONFIDENCE_SOURCES, Signals

MODELS = ["qwen2.5-1.5b-instruct", "qwen2.5-7b-instruct"]


def test_each_oracle_router_reads_its_own_part_of_the_trace():
    record = generate("math", 3, seed=2, models=MODELS)[0]
    assert Signals("oracle").confidence_for(record, MODELS) == {m: float(record.correct[m]) for m in MODELS}
    assert Signals("probability").confidence_for(record, MODELS) == record.solve_probability
    assert Signals("visible-probability").confidence_for(record, MODELS) == record.visible_solve_probability
    assert record.solve_probability != record.visible_solve_probability


def test_a_probability_oracle_on_a_trace_without_an_item_model_says_so():
    from dataclasses import replace

    record = replace(generate("math", 1, seed=2, models=MODELS)[0], solve_probability={})
    with pytest.raises(ValueError, match="item-response model"):
        Signals("probability").confidence_for(record, MODELS)


def test_every_oracle_router_a_preset_may_name_is_one_the_simulator_gives():
    assert set(ORACLE_ROUTERS) <= set(CONFIDENCE_SOURCES)
