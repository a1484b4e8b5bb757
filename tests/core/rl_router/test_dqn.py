"""Double DQN learns values: on a two-state chain it prefers the rewarded action and values the future by
the actions offered there; the shared network scores instances alike whatever their order."""

import pytest
import torch

from hetflow.core.rl_router.decode_bucket import DQN_BUCKETS
from hetflow.core.rl_router.dqn import DoubleDqn, DqnConfig, q_network
from hetflow.core.rl_router.state import permute_instances, state_dim


def test_it_learns_to_prefer_the_action_that_pays_and_to_discount_the_future():
    agent = DoubleDqn(state_dim=2, actions=3, cfg=DqnConfig(batch_size=64, target_sync_updates=20, architecture="mlp"),
                      seed=0)
    start, end = [1.0, 0.0], [0.0, 1.0]
    for _ in range(200):  # from start: action 1 pays 1 and ends; action 0 moves to "end", which pays 2 and ends
        agent.buffer.add(start, 1, 1.0, end, True)
        agent.buffer.add(start, 0, 0.0, end, False)
        agent.buffer.add(start, 2, -1.0, start, True)
        agent.buffer.add(end, 0, 2.0, start, True)
        agent.buffer.add(end, 1, 0.0, start, True)
        agent.buffer.add(end, 2, 0.0, start, True)
    before = agent.q_values(start)
    for _ in range(600):
        agent.learn(gamma=0.9)
    q_start, q_end = agent.q_values(start), agent.q_values(end)
    assert agent.act(end) == 0 and abs(q_end[0] - 2.0) < 0.3
    assert agent.act(start) == 0 and abs(q_start[0] - 1.8) < 0.3  # 0.9 x 2 beats the 1 at once
    assert q_start != before


def test_the_next_state_is_valued_by_its_best_offered_action_not_its_best_action():
    agent = DoubleDqn(state_dim=2, actions=3, cfg=DqnConfig(batch_size=64, target_sync_updates=20, architecture="mlp"),
                      seed=0)
    start, end = [1.0, 0.0], [0.0, 1.0]
    for _ in range(200):  # at "end", action 0 pays 2 but only action 1 (paying 0) is offered after "start"
        agent.buffer.add(start, 0, 0.0, end, False, next_offered=[1])
        agent.buffer.add(start, 1, 0.5, end, True)
        agent.buffer.add(end, 0, 2.0, start, True)
        agent.buffer.add(end, 1, 0.0, start, True)
    for _ in range(600):
        agent.learn(gamma=0.9)
    q_start = agent.q_values(start)
    assert abs(q_start[0]) < 0.3 and agent.act(start, offered=[0, 1]) == 1  # not 0.9 x 2 = 1.8
    assert agent.act(end) == 0 and agent.act(end, offered=[1, 2]) in (1, 2)


def test_epsilon_one_acts_at_random_over_the_actions_offered():
    agent = DoubleDqn(state_dim=2, actions=5, cfg=DqnConfig(architecture="mlp"), seed=1)
    assert {agent.act([0.0, 0.0], epsilon=1.0) for _ in range(200)} == set(range(5))
    assert {agent.act([0.0, 0.0], epsilon=1.0, offered=[1, 4]) for _ in range(100)} == {1, 4}


def test_the_shared_network_relabels_its_q_values_with_the_instances():
    net = q_network("shared", state_dim(4, DQN_BUCKETS), 5, hidden=8)
    state = torch.rand(state_dim(4, DQN_BUCKETS)).tolist()
    order = [2, 0, 3, 1]
    with torch.no_grad():
        q = net(torch.tensor([state]))[0]
        relabelled = net(torch.tensor([permute_instances(state, order, DQN_BUCKETS)]))[0]
    assert torch.allclose(relabelled, q[order + [4]], atol=1e-6)


def test_a_state_without_instance_rows_or_an_unknown_network_is_refused():
    with pytest.raises(ValueError, match="does not split"):
        q_network("shared", 2, 3, hidden=8)
    with pytest.raises(ValueError, match="unknown Q-network"):
        q_network("transformer", state_dim(2, DQN_BUCKETS), 3, hidden=8)


def test_demonstrations_teach_their_action_with_a_margin_where_rewards_do_not_tell():
    agent = DoubleDqn(state_dim=2, actions=3, cfg=DqnConfig(batch_size=64, architecture="mlp"), seed=0)
    state = [1.0, 0.0]
    for _ in range(100):  # every action pays the same: only the demonstrations say which to take
        agent.buffer.add(state, 2, 0.0, state, True, expert=True)
        agent.buffer.add(state, 0, 0.0, state, True)
        agent.buffer.add(state, 1, 0.0, state, True)
    for _ in range(300):
        agent.learn(gamma=0.9)
    q = agent.q_values(state)
    assert agent.act(state) == 2 and q[2] - max(q[0], q[1]) > 0.5


def test_a_label_teaches_by_the_margin_and_leaves_the_values_to_the_agents_own_transitions():
    agent = DoubleDqn(state_dim=2, actions=3, cfg=DqnConfig(batch_size=64, architecture="mlp"), seed=0)
    state = [1.0, 0.0]
    for _ in range(100):
        agent.buffer.add(state, 0, 1.0, state, True)  # what the agent did and earned
        agent.buffer.add(state, 1, 0.0, state, True, expert=True, label_only=True)  # what the teacher would do
    for _ in range(300):
        agent.learn(gamma=0.9)
    q = agent.q_values(state)
    assert abs(q[0] - 1.0) < 0.2  # the value is the agent's reward, not the label's made-up 0
    assert agent.act(state) == 1 and q[1] >= q[0]  # the label's action is pushed up to the margin
