"""Chimera Algorithm 1: the slack rule, the confidence margin, fallback under load, program affinity."""

import pytest

from hetflow.core.errors import Unavailable
from hetflow.core.policies import PolicyStore
from hetflow.core.policies.chimera_slack import ChimeraSlack, slack_rule, ttlt_ms
from tests.factories import call, engine, snapshot

Q = {"small": 0.40, "large": 0.70}


@pytest.mark.parametrize("ttlt, tau, margin, expected, rule", [
    ({"small": 0, "large": 0}, 0.5, 0.05, "large", "slack:fastest"),   # idle: ties on L go to the more confident
    ({"small": 100, "large": 140}, 0.5, 0.05, "large", "slack:more-confident-within-slack"),  # 140 <= 1.5*100
    ({"small": 100, "large": 160}, 0.5, 0.05, "small", "slack:fastest"),     # large over the slack: fall back
    ({"small": 100, "large": 160}, 1.0, 0.05, "large", "slack:more-confident-within-slack"),  # more slack
    ({"small": 100, "large": 120}, 0.5, 0.40, "small", "slack:fastest"),     # gain below the margin
    ({"small": 200, "large": 100}, 0.0, 0.05, "large", "slack:fastest"),     # large is the fastest anyway
])
def test_slack_rule_table(ttlt, tau, margin, expected, rule):
    assert slack_rule(Q, ttlt, tau, margin) == (expected, rule)


def test_rule_only_considers_the_most_confident_model_within_slack():
    # "a" is over the slack and skipped; "b" is the first within it, short of the margin: stop (line 22)
    q = {"a": 0.9, "b": 0.5, "c": 0.45}
    assert slack_rule(q, {"a": 500, "b": 120, "c": 100}, 0.5, 0.1) == ("c", "slack:fastest")
    assert slack_rule(q, {"a": 500, "b": 120, "c": 100}, 0.5, 0.05) == ("b", "slack:more-confident-within-slack")


def test_ttlt_is_in_flight_tokens_times_decode_time_over_batch():
    snap = snapshot(engine("s0", "small", 6400, decode_ms_per_token=10, max_batch_size=64),
                    engine("l0", "large", 3200, decode_ms_per_token=40, max_batch_size=32),
                    engine("l1", "large", 3200, decode_ms_per_token=40, max_batch_size=32),
                    engine("x", "dead", 1, healthy=False))
    assert ttlt_ms(snap) == {"small": pytest.approx(6400 * 10 / 64), "large": pytest.approx(6400 * 40 / 64)}


def test_fallback_under_load_is_monotone():
    """As the large model congests, traffic shifts to the small one and never back while load grows."""
    picker = ChimeraSlack(latency_slack=0.5, confidence_margin=0.05)
    chosen = []
    for large_tokens in range(0, 20_000, 1_000):
        snap = snapshot(engine("s0", "small", 2_000), engine("l0", "large", large_tokens))
        chosen.append(picker.pick(call(program_id=""), snap, Q, PolicyStore()).chosen)
    switch = chosen.index("small")
    assert chosen[:switch] == ["large"] * switch and set(chosen[switch:]) == {"small"}


def test_program_affinity_reuses_model_even_when_loaded():
    picker = ChimeraSlack()
    snap = snapshot(engine("s0", "small", 0), engine("l0", "large", 1e9), program_model="large")
    choice = picker.pick(call(), snap, {}, PolicyStore())
    assert (choice.chosen, choice.rule) == ("large", "program-affinity")


def test_affinity_to_a_model_without_healthy_engine_falls_back_to_the_rule():
    snap = snapshot(engine("s0", "small", 0), engine("l0", "large", 0, healthy=False), program_model="large")
    choice = ChimeraSlack().pick(call(), snap, Q, PolicyStore())
    assert choice.chosen == "small" and choice.rule.startswith("affinity-model-unavailable")


def test_no_healthy_engine_is_unavailable():
    with pytest.raises(Unavailable):
        ChimeraSlack().pick(call(), snapshot(engine("s0", "small", healthy=False)), Q, PolicyStore())
