"""When the RL router may take no action: only while no instance has a free batch slot and free KV for the
request, and never past the max hold; while some instance has room, only those are offered."""

from dataclasses import replace

from hetflow.core.rl_router.hold import has_room, may_hold, offered_actions
from hetflow.core.rl_router.state import NextRequest
from hetflow.core.snapshot import InFlightCall
from tests.factories import engine

REQUEST = NextRequest(prompt_tokens=600, predicted_decode_tokens=400.0)  # needs 1,000 KV tokens


def test_room_needs_a_free_slot_and_kv_for_the_prompt_and_the_predicted_decode():
    roomy = replace(engine("a", "m", max_batch_size=4, in_flight_requests=3), kv_cache_usage=0.5)
    assert has_room(roomy, REQUEST)
    assert not has_room(replace(roomy, in_flight_requests=4), REQUEST)  # every batch slot taken
    assert not has_room(replace(roomy, kv_cache_usage=0.9995), REQUEST)  # 50 tokens free
    assert has_room(replace(roomy, kv_cache_usage=0.99), REQUEST)  # exactly 1,000 free
    dispatched = replace(roomy, kv_cache_usage=0.99, pending_prefill_tokens=1)  # one token not yet prefilled
    assert not has_room(dispatched, REQUEST)


def test_room_counts_what_the_in_flight_calls_will_hold_at_their_end():
    roomy = replace(engine("a", "m", max_batch_size=4, in_flight_requests=1), kv_cache_usage=0.5)  # 50,000 free
    growing = replace(roomy, in_flight_calls=(InFlightCall(20_000, 79_500.0, 0.0),))  # 99,500 of 100,000 at its end
    assert has_room(roomy, REQUEST) and not has_room(growing, REQUEST)  # 1,000 needed
    assert has_room(replace(growing, in_flight_calls=(InFlightCall(20_000, 79_000.0, 0.0),)), REQUEST)  # fits
    small = replace(roomy, in_flight_calls=(InFlightCall(100, 100.0, 0.0),))
    assert not has_room(replace(small, kv_cache_usage=0.995), REQUEST)  # holding more now than predicted


def test_no_action_is_offered_only_while_every_instance_is_full_and_until_the_max_hold():
    full = replace(engine("a", "m"), kv_cache_usage=1.0)
    roomy = engine("b", "m")
    assert may_hold([full, full], REQUEST, held_s=0.5, max_hold_s=1.0)
    assert not may_hold([full, roomy], REQUEST, held_s=0.5, max_hold_s=1.0)
    assert not may_hold([full, full], REQUEST, held_s=1.0, max_hold_s=1.0)


def test_the_instances_with_room_are_offered_when_one_has_and_every_action_otherwise():
    full = replace(engine("a", "m"), kv_cache_usage=1.0)
    roomy = engine("b", "m")
    assert offered_actions([full, roomy, full, roomy], REQUEST, held_s=0.5, max_hold_s=1.0) == [1, 3]
    assert offered_actions([full, full], REQUEST, held_s=0.5, max_hold_s=1.0) == [0, 1, 2]  # 2: no action
    assert offered_actions([full, full], REQUEST, held_s=1.0, max_hold_s=1.0) == [0, 1]  # held too long
