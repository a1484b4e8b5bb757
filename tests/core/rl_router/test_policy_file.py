"""The RL router's policy file: written and read back whole; a damaged file, a file of another kind, a
network that does not match its engines, and a stack without the policy's engines are refused, saying why."""

import pytest
import torch

from hetflow.core.rl_router.decode_bucket import DQN_BUCKETS
from hetflow.core.rl_router.dqn import q_network
from hetflow.core.rl_router.policy_file import RlPolicy, check_engines, load, save
from hetflow.core.rl_router.state import state_dim

ENGINES = ("e0", "e1")


def policy(engines=ENGINES, hidden=8, architecture="mlp") -> RlPolicy:
    net = q_network(architecture, state_dim(len(engines), DQN_BUCKETS), len(engines) + 1, hidden)
    return RlPolicy(engines, "m", DQN_BUCKETS, 0.02, 4096, hidden, net.state_dict(), {"episodes": 3}, architecture)


@pytest.mark.parametrize("architecture", ["mlp", "shared"])
def test_a_policy_is_read_back_as_written(tmp_path, architecture):
    written = policy(architecture=architecture)
    save(written, tmp_path / "p.pt")
    read = load(tmp_path / "p.pt")
    assert (read.engine_ids, read.model, read.buckets, read.step_s, read.trained_on, read.architecture) == \
        (ENGINES, "m", DQN_BUCKETS, 0.02, {"episodes": 3}, architecture)
    state = torch.rand(1, state_dim(2, DQN_BUCKETS))
    assert torch.equal(read.network()(state), written.network()(state))


@pytest.mark.parametrize("content, reason", [
    (b"not a torch file at all", "cannot be read"),
    (None, "does not exist"),
])
def test_a_missing_or_damaged_file_is_refused(tmp_path, content, reason):
    path = tmp_path / "p.pt"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ValueError, match=reason):
        load(path)


def test_a_truncated_file_is_refused(tmp_path):
    save(policy(), tmp_path / "p.pt")
    data = (tmp_path / "p.pt").read_bytes()
    (tmp_path / "p.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="cannot be read"):
        load(tmp_path / "p.pt")


def test_a_file_of_another_kind_or_whose_network_does_not_fit_its_engines_is_refused(tmp_path):
    torch.save({"format": "something-else/1"}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not an RL policy file"):
        load(tmp_path / "other.pt")
    three_engine_net = policy(("a", "b", "c")).weights
    save(RlPolicy(ENGINES, "m", DQN_BUCKETS, 0.02, 4096, 8, three_engine_net), tmp_path / "p.pt")
    with pytest.raises(ValueError, match="damaged"):
        load(tmp_path / "p.pt")


def test_a_stack_without_the_policys_engines_or_with_another_model_on_them_is_refused():
    check_engines(policy(), {"e0": "m", "e1": "m", "e2": "other"})  # more engines are fine at start
    with pytest.raises(ValueError, match="e1 is not in the stack"):
        check_engines(policy(), {"e0": "m"})
    with pytest.raises(ValueError, match="e0 serves 'big'"):
        check_engines(policy(), {"e0": "big", "e1": "m"})
