"""Chimera Algorithm 1: the slack rule, the confidence margin, fallback under load, program affinity."""

import pytest

from hetflow.core.errors import Unavailable
from hetflow.core.policies.chimera_slack import ChimeraSlack, slack_rule, ttlt_ms, with_free_engines, with_open_slots
from hetflow.core.policies.contracts import PolicyStore, Prediction
from hetflow.core.snapshot import view_with
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
        chosen.append(picker.pick(call(program_id=""), snap, Q, {}, PolicyStore()).chosen)
    switch = chosen.index("small")
    assert chosen[:switch] == ["large"] * switch and set(chosen[switch:]) == {"small"}


def test_program_affinity_reuses_model_even_when_loaded():
    picker = ChimeraSlack()
    snap = snapshot(engine("s0", "small", 0), engine("l0", "large", 1e9), program_model="large")
    choice = picker.pick(call(), snap, {}, {}, PolicyStore())
    assert (choice.chosen, choice.rule) == ("large", "program-affinity")


def test_affinity_to_a_model_without_healthy_engine_falls_back_to_the_rule():
    snap = snapshot(engine("s0", "small", 0), engine("l0", "large", 0, healthy=False), program_model="large")
    choice = ChimeraSlack().pick(call(), snap, Q, {}, PolicyStore())
    assert choice.chosen == "small" and choice.rule.startswith("affinity-model-unavailable")


def test_no_healthy_engine_is_unavailable():
    with pytest.raises(Unavailable):
        ChimeraSlack().pick(call(), snapshot(engine("s0", "small", healthy=False)), Q, {}, PolicyStore())


def test_open_slots_first_sends_a_call_past_a_full_batch_to_a_model_with_room():
    """The small model's L is lower, but its batch is full; the large one has free slots (issue 35)."""
    small_full = engine("s0", "small", 256 * 200, decode_ms_per_token=22, max_batch_size=256, in_flight_requests=256)
    large_open = engine("l0", "large", 50 * 400, decode_ms_per_token=61, max_batch_size=256, in_flight_requests=50)
    snap = snapshot(small_full, large_open)
    plain = ChimeraSlack(latency_slack=0.0).pick(call(program_id=""), snap, Q, {}, PolicyStore())
    assert plain.chosen == "small"          # L: 51,200 * 22 / 256 = 4.4 s against 20,000 * 61 / 256 = 4.8 s
    slots = ChimeraSlack(latency_slack=0.0, open_slots_first=True)
    choice = slots.pick(call(program_id=""), snap, Q, {}, PolicyStore())
    assert (choice.chosen, choice.rule) == ("large", "open-slots;slack:fastest")
    assert set(choice.loads) == {"small", "large"}   # the receipt keeps every model's L


@pytest.mark.parametrize("small_requests, large_requests", [(10, 10), (256, 256)])
def test_open_slots_first_is_plain_chimera_when_all_or_no_models_have_room(small_requests, large_requests):
    snap = snapshot(engine("s0", "small", 1_000, max_batch_size=256, in_flight_requests=small_requests),
                    engine("l0", "large", 9_000, max_batch_size=256, in_flight_requests=large_requests))
    plain = ChimeraSlack(latency_slack=0.0).pick(call(program_id=""), snap, Q, {}, PolicyStore())
    slots = ChimeraSlack(latency_slack=0.0, open_slots_first=True).pick(call(program_id=""), snap, Q, {}, PolicyStore())
    assert (slots.chosen, slots.rule) == (plain.chosen, plain.rule) == ("small", "slack:fastest")


def test_open_slots_first_counts_any_engine_of_the_model():
    snap = snapshot(engine("s0", "small", 0, max_batch_size=8, in_flight_requests=8),
                    engine("s1", "small", 0, max_batch_size=8, in_flight_requests=3),
                    engine("l0", "large", 5_000, max_batch_size=8, in_flight_requests=1))
    assert with_open_slots(snap, ttlt_ms(snap)).keys() == {"small", "large"}
    snap = snapshot(engine("s0", "small", 0, max_batch_size=8, in_flight_requests=8),
                    engine("s1", "small", 0, max_batch_size=8, in_flight_requests=3, healthy=False),
                    engine("l0", "large", 5_000, max_batch_size=8, in_flight_requests=1))
    assert with_open_slots(snap, ttlt_ms(snap)).keys() == {"large"}


@pytest.mark.parametrize("large_engine, expected, rule", [
    ({}, "large", "slack:more-confident-within-slack"),                              # room: the slack is spent
    ({"waiting": 2}, "small", "free-engines;slack:fastest"),                          # its queue: not spent
    ({"dispatched_since_report": 1}, "small", "free-engines;slack:fastest"),          # one sent since its report
    ({"in_flight_requests": 64}, "small", "free-engines;slack:fastest"),              # its batch full
    ({"kv_cache_usage": 0.97}, "large", "slack:more-confident-within-slack"),         # KV for the call and growth
    ({"kv_cache_usage": 0.986}, "small", "free-engines;slack:fastest"),  # KV free now, but its calls will grow into it
])
def test_slack_into_free_engines_spends_the_slack_only_where_the_confident_model_has_room(large_engine, expected,
                                                                                          rule):
    small = engine("s0", "small", 1_000, max_batch_size=64, in_flight_requests=10)
    large = view_with(engine("l0", "large", 1_400, max_batch_size=64, in_flight_requests=10), **large_engine)
    snap = snapshot(small, large)                     # L: 312.5 ms against 437.5, within tau 0.5 of the small's
    plain = ChimeraSlack(latency_slack=0.5).pick(call(program_id=""), snap, Q, {}, PolicyStore())
    assert (plain.chosen, plain.rule) == ("large", "slack:more-confident-within-slack")
    choice = ChimeraSlack(latency_slack=0.5, slack_into_free_engines=True).pick(call(program_id=""), snap, Q, {},
                                                                                 PolicyStore())
    assert (choice.chosen, choice.rule) == (expected, rule)


def test_slack_into_free_engines_keeps_the_fastest_model_whatever_its_queue():
    snap = snapshot(view_with(engine("s0", "small", 1_000, in_flight_requests=64), waiting=5),
                    view_with(engine("l0", "large", 9_000), waiting=5))
    assert with_free_engines(call(), snap, ttlt_ms(snap), Q, {}).keys() == {"small"}
    snap = snapshot(view_with(engine("s0", "small", 1_000), waiting=5), engine("l0", "large", 1_200),
                    view_with(engine("l1", "large", 1_200), waiting=3))
    # one free engine will do
    assert with_free_engines(call(), snap, ttlt_ms(snap), Q, {}).keys() == {"small", "large"}


def test_program_affinity_holds_under_open_slots_first():
    snap = snapshot(engine("s0", "small", 0, max_batch_size=4, in_flight_requests=4),
                    engine("l0", "large", 0, max_batch_size=4), program_model="small")
    choice = ChimeraSlack(open_slots_first=True).pick(call(), snap, Q, {}, PolicyStore())
    assert (choice.chosen, choice.rule) == ("small", "program-affinity")


def test_a_workflows_own_slack_and_margin_decide_its_calls_and_the_top_level_ones_the_others():
    """The large model's drain time is 1.5x the small one's and its confidence 0.3 higher: within tau 1 at
    margin 0.05 (code's), beyond tau 0.2 (the rest), and below math's margin 0.4 at math's tau 1."""
    picker = ChimeraSlack(latency_slack=0.2, per_workflow={"code": {"latency_slack": 1.0},
                                                           "math": {"latency_slack": 1.0, "confidence_margin": 0.4}})
    snap = snapshot(engine("s0", "small", 1_000), engine("l0", "large", 1_500))
    chosen = {w: picker.pick(call(program_id="", workflow=w), snap, Q, {}, PolicyStore())
              for w in ("code", "chat", "math")}
    assert (chosen["code"].chosen, chosen["code"].params["latency_slack"]) == ("large", 1.0)
    assert (chosen["chat"].chosen, chosen["chat"].params["latency_slack"]) == ("small", 0.2)
    assert (chosen["math"].chosen, chosen["math"].params["confidence_margin"]) == ("small", 0.4)


@pytest.mark.parametrize("per_workflow", [{"code": {"latency_slack": -1.0}}, {"code": {"slack": 1.0}}])
def test_a_workflows_settings_must_be_known_and_not_negative(per_workflow):
    with pytest.raises(ValueError, match="per_workflow"):
        ChimeraSlack(per_workflow=per_workflow)


def test_the_work_margin_adds_to_the_confidence_margin_of_its_model_only():
    ttlt = {"small": 100, "large": 120}                                   # large within tau 0.5; gain 0.30
    assert slack_rule(Q, ttlt, 0.5, 0.05, {"large": 0.20})[0] == "large"   # 0.70 >= 0.40 + 0.25
    assert slack_rule(Q, ttlt, 0.5, 0.05, {"large": 0.30}) == ("small", "slack:fastest")  # 0.70 < 0.40 + 0.35
    assert slack_rule(Q, ttlt, 0.5, 0.05, {"small": 1.0})[0] == "large"    # the fallback's own cost never counts


@pytest.mark.parametrize("large_tokens, expected", [(500, "large"), (4_000, "small")])
def test_margin_per_ktoken_keeps_long_programs_off_the_more_confident_model(large_tokens, expected):
    """Gain 0.30 against delta_s 0.05 + kappa 0.1 per 1,000 predicted tokens on the large model: 0.10 for a
    500-token program (it goes), 0.45 for a 4,000-token one (it stays); at kappa 0 both go (Chimera)."""
    snap = snapshot(engine("s0", "small", 1_000), engine("l0", "large", 1_200))
    predictions = {"small": Prediction(large_tokens * 1.2), "large": Prediction(large_tokens)}
    choice = ChimeraSlack(margin_per_ktoken=0.1).pick(call(program_id=""), snap, Q, predictions, PolicyStore())
    assert (choice.chosen, choice.params["margin_per_ktoken"]) == (expected, 0.1)
    assert choice.params["work_margin:large"] == pytest.approx(0.1 * large_tokens / 1e3)   # in the receipt
    assert ChimeraSlack().pick(call(program_id=""), snap, Q, predictions, PolicyStore()).chosen == "large"
    code_only = ChimeraSlack(per_workflow={"code": {"margin_per_ktoken": 0.1}})
    assert code_only.pick(call(program_id="", workflow="code"), snap, Q, predictions, PolicyStore()).chosen == expected
    assert code_only.pick(call(program_id="", workflow="chat"), snap, Q, predictions, PolicyStore()).chosen == "large"


@pytest.mark.parametrize("small_tokens, large_tokens, tau, reads", [
    (0, 0, 0.0, True),                  # idle: both tie at L = 0, so the confidences decide
    (2_000, 0, 0.0, False),             # no slack: only the fastest model can be taken
    (2_000, 2_800, 0.5, True),          # 2,800 <= 1.5 x 2,000: both within the slack
    (2_000, 3_200, 0.5, False),         # the large model over the slack
])
def test_the_confidences_are_read_only_where_they_can_change_the_pick(small_tokens, large_tokens, tau, reads):
    picker = ChimeraSlack(latency_slack=tau, confidence_margin=0.05)
    snap = snapshot(engine("s0", "small", small_tokens), engine("l0", "large", large_tokens))
    assert picker.reads_confidence(call(program_id=""), snap) is reads
    if not reads:  # whatever the router would say, the pick is the same
        picks = {picker.pick(call(program_id=""), snap, q, {}, PolicyStore()).chosen
                 for q in ({"small": 0.9, "large": 0.1}, {"small": 0.1, "large": 0.9}, {})}
        assert len(picks) == 1
