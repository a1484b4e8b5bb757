"""Double DQN learns values: on a two-state chain it prefers the rewarded action and values the future."""

from hetflow.core.rl_router.dqn import DoubleDqn, DqnConfig


def test_it_learns_to_prefer_the_action_that_pays_and_to_discount_the_future():
    agent = DoubleDqn(state_dim=2, actions=3, cfg=DqnConfig(batch_size=64, target_sync_updates=20), seed=0)
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


def test_epsilon_one_acts_at_random_over_every_action():
    agent = DoubleDqn(state_dim=2, actions=5, seed=1)
    assert {agent.act([0.0, 0.0], epsilon=1.0) for _ in range(200)} == set(range(5))
