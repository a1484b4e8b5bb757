"""Named policies: each a configuration of the balancer's stages and the engines' queue."""

import pytest

from hetflow.core.pipeline import Pipeline
from hetflow.core.presets import PRESETS, apply_to_stack, resolve

STACK = {"balancer": {"port": 1}, "engines": [{"name": "a"}, {"name": "b", "queue": {"starvation_threshold": 7}}]}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_builds_a_pipeline(name):
    pipeline = Pipeline(resolve(name).policy)
    assert pipeline.priority_rule.prediction_target in ("workflow", "call")


def test_overrides_change_the_model_stage_parameters():
    preset = resolve("chimera:latency_slack=1.5")
    assert preset.policy.model_params == {"latency_slack": 1.5, "confidence_margin": 0.05}
    assert resolve("chimera").policy.model_params["latency_slack"] == 0.5


@pytest.mark.parametrize("spec, match", [("fifo", "unknown policy"), ("chimera:tau=1", "not a parameter"),
                                         ("least-load:latency_slack=1", "not a parameter")])
def test_bad_specs_are_refused(spec, match):
    with pytest.raises(ValueError, match=match):
        resolve(spec)


def test_apply_to_stack_sets_the_stages_and_every_engines_queue():
    out = apply_to_stack(STACK, resolve("mlfq"))
    assert out["balancer"]["policy"]["engine"] == "least-load" and out["balancer"]["port"] == 1
    assert [e["queue"]["discipline"] for e in out["engines"]] == ["mlfq", "mlfq"]
    assert out["engines"][1]["queue"]["starvation_threshold"] == 7
    assert "queue" not in STACK["engines"][0]                        # the input is left alone
    assert apply_to_stack(STACK, resolve("chimera-no-router"))["router"]["kind"] == "fixed-prior"


@pytest.mark.parametrize("name", ["vllm-stjf", "ltr"])
def test_policies_needing_signals_the_stack_lacks_run_only_in_the_simulator(name):
    with pytest.raises(ValueError, match="simulator only"):
        apply_to_stack(STACK, resolve(name))
