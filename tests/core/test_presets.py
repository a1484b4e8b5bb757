"""Named policies: each a configuration of the balancer's stages and the engines' queue."""

import pytest

from hetflow.core.pipeline import Pipeline
from hetflow.core.presets import PRESETS, apply_to_stack, full_parameters, resolve, split_specs

STACK = {"balancer": {"port": 1}, "engines": [{"name": "a"}, {"name": "b", "queue": {"starvation_threshold": 7}}]}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_builds_a_pipeline(name):
    pipeline = Pipeline(resolve(name).policy, tells_completions=True)  # as the simulator builds it
    assert pipeline.priority_rule.prediction_target in ("workflow", "call")


AGING = ("priority", {"starvation_threshold": 100, "running_quantum": 50})
NONE = ("no-reserve", {})
NO_KV = {"retention": ("free-at-finish", {}), "reserve": NONE}
"""No retention and no reserve: every preset but the default (which retains)."""
PINNED = {
    "chimera": {"model": ("chimera-slack", {"latency_slack": 0.5, "confidence_margin": 0.05,
                                            "open_slots_first": False, "margin_per_ktoken": 0.0,
                                            "per_workflow": None, "slack_into_free_engines": False}),
                "engine": ("least-inflight-tokens", {}), "priority": ("predicted-total-tokens", {}), **NO_KV,
                "queue": AGING},
    "hexgen": {"model": ("least-load", {}), "engine": ("workload-balanced", {"alpha": 0.0, "beta": 1.0}),
               "priority": ("urgency", {"default_slo_scale": 0.0}), **NO_KV, "queue": AGING},
    "kairos": {"model": ("least-load", {}),
               "engine": ("memory-packer", {"then": "lowest-peak", "alpha": 0.0, "beta": 1.0}),
               "priority": ("agent-priority", {}), **NO_KV, "queue": AGING},
    "hetflow": {"model": ("chimera-slack", {"latency_slack": 0.0, "confidence_margin": 0.05,
                                            "open_slots_first": True, "margin_per_ktoken": 0.0,
                                            "per_workflow": {"code": {"latency_slack": 1.0,
                                                                      "margin_per_ktoken": 0.4}},
                                            "slack_into_free_engines": False}),
                "engine": ("scored", {"filters": [{"working-set": {"resume_where_fits": True, "growth_share": 0.25}}],
                                      "scorers": {"queue": 2.0, "kv-utilization": 2.0, "program-affinity": 3.0,
                                                  "spread-prefix-affinity": 3.0}}),
                "priority": ("program-remaining-work", {}),
                "retention": ("workflow-ttl", {"max_hold_s": 30.0, "single_gap_sigma": 1.0, "busy_hold_cost": 1.0}),
                "reserve": NONE, "queue": AGING},
    "hetflow-no-retention": {"model": ("chimera-slack", {"latency_slack": 0.0, "confidence_margin": 0.05,
                                                    "open_slots_first": False, "margin_per_ktoken": 0.0,
                                            "per_workflow": None, "slack_into_free_engines": False}),
                        "engine": ("scored", {"filters": ["working-set"], "scorers": {
                            "queue": 2.0, "kv-utilization": 2.0, "prefix-affinity": 3.0}}),
                        "priority": ("predicted-total-tokens", {}), **NO_KV, "queue": AGING},
    "hetflow-card": {"model": ("chimera-slack", {"latency_slack": 0.5, "confidence_margin": 0.05,
                                                 "open_slots_first": False, "margin_per_ktoken": 0.0,
                                            "per_workflow": None, "slack_into_free_engines": False}),
                "engine": ("memory-packer", {"then": "workload-balanced", "alpha": 0.0, "beta": 1.0}),
                "priority": ("urgency", {"default_slo_scale": 5.0}), **NO_KV, "queue": AGING},
    "least-load": {"model": ("least-load", {}), "engine": ("least-load", {}), "priority": ("fcfs", {}), **NO_KV,
                   "queue": AGING},
    "vllm-router-program": {  # the router's documented recommended configuration (docs/program_scheduling.md)
        "model": ("engine-first", {}),
        "engine": ("program-admission", {"global_queue": True, "max_active_programs": 64, "waiting_threshold": 1,
                                         "decode_buffer_tokens": 100, "max_acting_ttl_s": 10.0,
                                         "stats_window_size": 100, "force_resume_timeout_s": 300.0,
                                         "metrics_interval_s": 1.0, "cross_rank_headroom_ratio": 1.2,
                                         "recheck_s": 0.2, "session_header": False,
                                         "binding_strategy": "consistent_hash",
                                         "servers_report_cached_tokens": False, "force_resume_floor_s": 30.0}),
        "priority": ("fcfs", {}), **NO_KV, "queue": AGING},
    "mlfq": {"model": ("least-load", {}), "engine": ("least-load", {}), "priority": ("fcfs", {}),
             **NO_KV, "queue": ("mlfq", {"starvation_threshold": 100, "running_quantum": 50,
                                         "first_quantum_tokens": 32, "levels": 8})},
}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_each_preset_runs_exactly_its_papers_parameters(name):
    assert full_parameters(resolve(name)) == PINNED[name]


def test_overrides_change_the_stage_that_takes_the_parameter():
    preset = resolve("chimera:latency_slack=1.5")
    assert full_parameters(preset)["model"] == ("chimera-slack", {"latency_slack": 1.5, "confidence_margin": 0.05,
                                                                  "open_slots_first": False, "margin_per_ktoken": 0.0,
                                            "per_workflow": None, "slack_into_free_engines": False})
    assert resolve("hexgen:alpha=0.3").policy.engine.params == {"alpha": 0.3}
    assert full_parameters(resolve("chimera"))["model"][1]["latency_slack"] == 0.5


def test_a_boolean_override_reads_false_as_false():
    def engine_params(spec):
        return full_parameters(resolve(spec))["engine"][1]

    assert engine_params("vllm-router-program:global_queue=false")["global_queue"] is False
    assert engine_params("vllm-router-program:session_header=true")["session_header"] is True


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


def test_a_composition_defined_in_configuration_becomes_a_named_policy():
    from hetflow.core.presets import define

    raw = {"name": "my-mix", "model": "engine-first", "engine": "scored",
           "engine_params": {"scorers": {"queue": 1}}, "priority": "fcfs"}
    preset = define(raw, "test.yaml")
    assert resolve("my-mix") is preset and preset.policy.engine.params == {"scorers": {"queue": 1}}
    assert define(dict(raw), "again.yaml").policy == preset.policy          # the same definition twice is fine
    with pytest.raises(ValueError, match="already defined differently"):
        define({**raw, "priority": "urgency"}, "other.yaml")
    with pytest.raises(ValueError, match="already defined differently"):
        define({"name": "least-load", "engine": "round-robin"}, "clash.yaml")
    with pytest.raises(ValueError, match="unknown engine-scorer"):
        define({"name": "broken", "engine": "scored", "engine_params": {"scorers": {"nope": 1}}}, "bad.yaml")


def test_policy_specs_split_at_commas_that_start_a_policy():
    assert split_specs("llm-d,vllm-router-program:session_header=true,max_active_programs=256,hetflow") == \
        ["llm-d", "vllm-router-program:session_header=true,max_active_programs=256", "hetflow"]
    assert split_specs("chimera:latency_slack=1.0") == ["chimera:latency_slack=1.0"]


def test_a_composition_on_a_base_keeps_its_stages_and_may_take_an_oracle_router_in_the_simulator_only():
    from hetflow.core.presets import define

    preset = define({"name": "hetflow-probability-test", "base": "hetflow", "confidence": "probability"}, "t.yaml")
    hetflow = resolve("hetflow")
    assert (preset.policy, preset.queue_discipline) == (hetflow.policy, hetflow.queue_discipline)
    assert preset.confidence == "probability"
    assert resolve("hetflow-probability-test:latency_slack=1.0").policy.model.params["latency_slack"] == 1.0
    renamed = define({"name": "hetflow-rr-test", "base": "hetflow", "engine": "round-robin"}, "t.yaml")
    assert renamed.policy.engine.params == {} and renamed.policy.model == hetflow.policy.model
    with pytest.raises(ValueError, match="simulator only"):
        apply_to_stack(STACK, preset)
    with pytest.raises(ValueError, match="confidence is one of"):
        define({"name": "hetflow-psychic", "base": "hetflow", "confidence": "psychic"}, "t.yaml")


def test_each_preset_sets_the_served_routers_reading_as_it_reads_the_router():
    from hetflow.core.presets import define

    raw = define({"name": "hetflow-raw-reading-test", "base": "hetflow", "confidence": "router"}, "t.yaml")
    assert apply_to_stack(STACK, resolve("hetflow"))["router"]["reading"] == "one-difficulty"   # the default's
    assert apply_to_stack(STACK, raw)["router"]["reading"] == "per-model"
    assert apply_to_stack(STACK, resolve("chimera"))["router"]["reading"] == "per-model"       # Chimera 3.3's
    assert apply_to_stack(STACK, resolve("chimera-no-router"))["router"]["kind"] == "fixed-prior"


def test_a_composition_may_take_the_true_lengths_in_the_simulator_only():
    from hetflow.core.presets import define

    preset = define({"name": "hetflow-true-lengths-test", "base": "hetflow", "prediction": "oracle"}, "t.yaml")
    assert (preset.prediction, preset.policy) == ("oracle", resolve("hetflow").policy)
    assert define({"name": "hetflow-on-true-lengths-test", "base": "hetflow-true-lengths-test"},
                  "t.yaml").prediction == "oracle"
    with pytest.raises(ValueError, match="simulator only"):
        apply_to_stack(STACK, preset)
    with pytest.raises(ValueError, match="prediction is one of"):
        define({"name": "hetflow-clairvoyant", "base": "hetflow", "prediction": "psychic"}, "t.yaml")


def test_no_presets_description_names_an_issue_number():
    import re

    from hetflow.core.presets import PRESETS

    named = {p.name: p.source for p in PRESETS.values() if re.search(r"\bissues? \d+", p.source, re.IGNORECASE)}
    assert named == {}
