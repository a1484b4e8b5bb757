"""The RL router's training loop: exploration fades as configured, every decision is remembered and
learned from, steps with nothing to route are not decisions, and a greedy evaluation episode learns
nothing."""

from dataclasses import replace

from hetflow.core.engine.profile import EngineSpec, load_profile
from hetflow.core.rl_router.dqn import DqnConfig
from simulator.rl_env import RoutedRequest, RoutingEnv
from simulator.rl_train import TrainConfig, epsilon, run_episode, train

PROFILE = load_profile("qwen2.5-1.5b-instruct@a6000")
ENGINES = [EngineSpec(f"e{i}", PROFILE.model, PROFILE) for i in range(2)]
REQUESTS = [RoutedRequest(f"r{i}", 0.02 * i, 50 + 300 * (i % 2), 10 + 40 * (i % 3), 10 + 40 * (i % 3))
            for i in range(10)]


def test_exploration_fades_linearly_then_stops():
    cfg = TrainConfig(epsilon_start=1.0, epsilon_end=0.0, explore_episodes=4)
    assert [epsilon(k, cfg) for k in range(6)] == [1.0, 0.75, 0.5, 0.25, 0.0, 0.0]


def test_every_decision_is_remembered_and_learned_from_and_evaluation_learns_nothing():
    env = RoutingEnv(ENGINES, REQUESTS)
    cfg = TrainConfig(episodes=2, explore_episodes=1, dqn=DqnConfig(batch_size=32))
    agent, episodes = train(env, cfg, seed=0)
    decisions = sum(e.decisions for e in episodes)
    assert decisions >= 2 * len(REQUESTS) and all(e.steps > e.decisions for e in episodes)  # idle steps: no decision
    copies = 1 + cfg.relabelled_copies  # each transition, and it with its instances relabelled
    assert agent.buffer.count == copies * decisions and agent.updates == decisions
    assert all(e.finished == len(REQUESTS) for e in episodes)
    evaluation = run_episode(env, agent, k=cfg.episodes, cfg=cfg, learn=False)
    assert agent.buffer.count == copies * decisions and evaluation.steps > 0


class Waiter:
    """Takes no action whenever it is offered, and counts the offers; routes in turn otherwise."""

    def __init__(self, env: RoutingEnv) -> None:
        self.env, self.offers, self.routed = env, 0, 0

    def act(self, state, eps, offered):
        if self.env.no_action in offered:
            self.offers += 1
            return self.env.no_action
        self.routed += 1
        return offered[(self.routed - 1) % len(offered)]


def test_no_action_is_offered_only_while_no_instance_has_room_and_never_past_the_max_hold():
    roomy = RoutingEnv(ENGINES, REQUESTS)
    waiter = Waiter(roomy)
    assert run_episode(roomy, waiter, k=0, cfg=TrainConfig(), learn=False).finished == len(REQUESTS)  # type: ignore[arg-type]
    assert waiter.offers == 0

    tight = replace(PROFILE, kv_capacity_tokens=512, max_num_seqs=8)  # one request at a time per instance
    full = RoutingEnv([EngineSpec(f"e{i}", tight.model, tight) for i in range(2)],
                      [RoutedRequest(f"r{i}", 0.0, 300, 100, 100.0) for i in range(6)], max_hold_s=0.2)
    waiter = Waiter(full)
    assert run_episode(full, waiter, k=0, cfg=TrainConfig(), learn=False).finished == 6  # type: ignore[arg-type]
    assert waiter.offers == 4  # each of the four that found both instances full, once: then it waits for room
    started_late = sorted(full.first_token_s.values())[2:]  # two went at once; the others waited
    assert all(t >= full.max_hold_s for t in started_late)


def test_the_engines_finish_without_steps_once_nothing_is_left_to_route():
    long = RoutedRequest("long", 0.0, 50, 4000, 4000.0)  # minutes of decoding after the last decision
    env = RoutingEnv(ENGINES, [*REQUESTS, long])
    cfg = TrainConfig(tail_steps=10)
    agent, _ = train(env, TrainConfig(episodes=0), seed=0)
    episode = run_episode(env, agent, k=0, cfg=cfg, learn=False)
    assert episode.finished == len(REQUESTS) + 1
    assert episode.steps * env.step_s < env.latencies_s()["long"]


def test_training_on_a_tiny_workload_improves_the_reward_of_the_network_it_starts_from():
    tight = replace(PROFILE, kv_capacity_tokens=2048, max_num_seqs=8)  # routing and holding decide queueing
    env = RoutingEnv([EngineSpec(f"e{i}", tight.model, tight) for i in range(2)],
                     [RoutedRequest(f"r{i}", 0.01 * i, 100 + 100 * (i % 3), 20 + 30 * (i % 4), 20 + 30 * (i % 4))
                      for i in range(30)])
    cfg = TrainConfig(episodes=10, explore_episodes=5, dqn=DqnConfig(batch_size=64))
    untrained, _ = train(env, TrainConfig(episodes=0), seed=1)
    before = run_episode(env, untrained, k=cfg.episodes, cfg=cfg, learn=False)  # greedy, as it starts
    agent, _ = train(env, cfg, seed=1)
    after = run_episode(env, agent, k=cfg.episodes, cfg=cfg, learn=False)
    assert after.finished == before.finished == 30
    assert after.reward > before.reward and after.mean_latency_s < before.mean_latency_s


def test_demonstration_episodes_are_maximum_capacity_usages_and_remembered_as_expert():
    tight = replace(PROFILE, kv_capacity_tokens=512, max_num_seqs=8)
    env = RoutingEnv([EngineSpec(f"e{i}", tight.model, tight) for i in range(2)],
                     [RoutedRequest(f"r{i}", 0.0, 300, 100, 100.0) for i in range(6)])
    cfg = TrainConfig(episodes=1, demonstration_episodes=1, dqn=DqnConfig(batch_size=32))
    agent, (taught,) = train(env, cfg, seed=0)
    assert taught.finished == 6 and taught.decisions > 6  # no action while neither instance had room
    assert agent.buffer.expert[:agent.buffer.count].sum() == agent.buffer.count == taught.decisions


def test_the_teacher_sends_the_request_to_the_most_free_kv_with_room_and_holds_while_none_has_room():
    tight = replace(PROFILE, kv_capacity_tokens=512, max_num_seqs=8)
    env = RoutingEnv([EngineSpec(f"e{i}", tight.model, tight) for i in range(2)],
                     [RoutedRequest(f"r{i}", 0.0, 300, 100, 100.0) for i in range(3)])
    env.decide(1)  # r0 to e1: e0 has the more free KV now
    assert env.max_capacity_action() == 0
    env.decide(0)  # r1 to e0: neither has room for 400 tokens
    assert env.max_capacity_action() == env.no_action


def test_teacher_labels_mark_the_teachers_action_at_the_agents_own_states_for_the_margin_alone():
    tight = replace(PROFILE, kv_capacity_tokens=512, max_num_seqs=8)
    env = RoutingEnv([EngineSpec(f"e{i}", tight.model, tight) for i in range(2)],
                     [RoutedRequest(f"r{i}", 0.0, 300, 100, 100.0) for i in range(6)])
    cfg = TrainConfig(episodes=2, demonstration_episodes=1, teacher_labels=True, dqn=DqnConfig(batch_size=32))
    agent, (taught, own) = train(env, cfg, seed=0)
    count = agent.buffer.count
    labels = (agent.buffer.td[:count] == 0.0).sum()
    assert labels == own.decisions  # one label per decision of the agent's episode, none in the teacher's
    assert agent.buffer.expert[:count].sum() == taught.decisions + own.decisions
