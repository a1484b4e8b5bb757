"""The RL router as an engine picker (load-balancer paper, 4.3): the instance of highest Q, no action
holds the call for one step, only while no instance has room for it and never past max_hold_s, only the
instances with room are offered while one has, the
receipt's scores are the Q-values, and a pool that is not the policy's engines falls back to the default
engine choice, saying so."""

from dataclasses import replace

import pytest
import torch

from hetflow.core import plugins
from hetflow.core.policies.contracts import PolicyStore, Prediction, WaitForCapacity
from hetflow.core.rl_router.decode_bucket import DQN_BUCKETS
from hetflow.core.rl_router.dqn import QNetwork
from hetflow.core.rl_router.policy_file import RlPolicy, save
from hetflow.core.rl_router.state import state_dim
from tests.factories import call, engine, profile, snapshot

ENGINES = ("e0", "e1", "e2")


def policy_with_q(tmp_path, q_values) -> str:
    """A policy whose network answers ``q_values`` (instances, then no action) whatever the state."""
    net = QNetwork(state_dim(len(ENGINES), DQN_BUCKETS), len(ENGINES) + 1, hidden=4)
    with torch.no_grad():
        for p in net.parameters():
            p.zero_()
        net.layers[-1].bias.copy_(torch.tensor(q_values))
    path = tmp_path / "policy.pt"
    save(RlPolicy(ENGINES, "m", DQN_BUCKETS, 0.05, 4096, 4, net.state_dict()), path)
    return str(path)


def pool(*engine_ids, kv_cache_usage=0.0):
    return snapshot(*(replace(engine(e, "m", engine_profile=profile()), kv_cache_usage=kv_cache_usage)
                      for e in engine_ids), taken_unix_s=10.0)


def pick(path, cluster, received_unix_s=10.0, model="m", held=False, **params):
    picker = plugins.build("engine-picker", "rl-router", {"policy": path, **params})
    return picker.pick(call(received_unix_s=received_unix_s, input_tokens=100), cluster, model, Prediction(50),
                       PolicyStore(waiting_calls=3, call_is_held=held))


def test_the_instance_of_highest_q_is_chosen_and_the_receipt_names_every_q_value(tmp_path):
    choice = pick(policy_with_q(tmp_path, [0.1, 0.7, 0.3, -1.0]), pool(*ENGINES))
    assert choice.chosen == "e1" and choice.rule == "rl-router:q-max"
    assert choice.scores == pytest.approx({"e0": 0.1, "e1": 0.7, "e2": 0.3, "no-action": -1.0})
    assert choice.params["queue_length"] == 3


def test_no_action_holds_the_call_one_step_while_no_instance_has_room_then_max_hold_releases_it(tmp_path):
    path = policy_with_q(tmp_path, [0.1, 0.7, 0.3, 2.0])
    full = pool(*ENGINES, kv_cache_usage=0.9995)  # 50 free KV tokens of 100,000: not the call's 150
    with pytest.raises(WaitForCapacity) as wait:
        pick(path, full, received_unix_s=9.5)
    assert wait.value.retry_after_s == 0.05 and "no action" in str(wait.value)
    late = pick(path, full, received_unix_s=8.0, max_hold_s=1.0)  # held 2 s already
    assert late.chosen == "e1" and late.params["no_action_offered"] == 0.0


def test_a_held_call_waits_for_room_undecided_then_goes_where_q_is_highest(tmp_path):
    path = policy_with_q(tmp_path, [0.1, 0.7, 0.3, -1.0])  # no action valued least
    with pytest.raises(WaitForCapacity, match="waits for room"):
        pick(path, pool(*ENGINES, kv_cache_usage=0.9995), received_unix_s=9.5, held=True)
    assert pick(path, pool(*ENGINES, kv_cache_usage=0.9995), received_unix_s=9.5).chosen == "e1"  # a new call
    assert pick(path, pool(*ENGINES), received_unix_s=9.5, held=True).chosen == "e1"


def test_no_action_is_not_offered_while_an_instance_has_room(tmp_path):
    choice = pick(policy_with_q(tmp_path, [0.1, 0.7, 0.3, 2.0]), pool(*ENGINES), received_unix_s=9.9)
    assert choice.chosen == "e1" and choice.rule == "rl-router:q-max" and choice.params["no_action_offered"] == 0.0


def test_while_an_instance_has_room_only_those_with_room_are_offered(tmp_path):
    cluster = snapshot(*(replace(engine(e, "m", engine_profile=profile()), kv_cache_usage=usage)
                         for e, usage in zip(ENGINES, (0.0, 0.9995, 0.0))), taken_unix_s=10.0)
    choice = pick(policy_with_q(tmp_path, [0.1, 0.7, 0.3, 2.0]), cluster)  # e1, of highest Q, is full
    assert choice.chosen == "e2" and choice.params["instances_offered"] == 2
    assert choice.scores["e1"] == pytest.approx(0.7)  # its Q is still in the receipt


@pytest.mark.parametrize("engine_ids, model, note", [
    (("e0", "e1"), "m", "engines now ['e0', 'e1']"),              # an engine removed or down
    (("e0", "e1", "e2", "e3"), "m", "engines now ['e0', 'e1', 'e2', 'e3']"),  # one added
    (ENGINES, "other", "trained for m, not other"),
])
def test_a_pool_other_than_the_policys_falls_back_to_the_default_engine_choice(tmp_path, engine_ids, model, note):
    cluster = snapshot(*(engine(e, model, engine_profile=profile()) for e in engine_ids), taken_unix_s=10.0)
    choice = pick(policy_with_q(tmp_path, [0.1, 0.7, 0.3, 2.0]), cluster, model=model)
    assert choice.rule.startswith(f"rl-router:fallback ({note}") and choice.chosen in engine_ids


def test_a_missing_or_damaged_policy_is_refused_when_the_picker_is_built(tmp_path):
    with pytest.raises(ValueError, match="needs 'policy'"):
        plugins.build("engine-picker", "rl-router", {})
    (tmp_path / "bad.pt").write_bytes(b"\x00garbage")
    with pytest.raises(ValueError, match="cannot be read"):
        plugins.build("engine-picker", "rl-router", {"policy": str(tmp_path / "bad.pt")})
