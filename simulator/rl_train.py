"""Training the RL router in the simulator (load-balancer paper, 4.3, 5, C.10): episodes of the routing
environment, epsilon-greedy exploration that ends after ``explore_episodes`` (C.10.2: "after episode 20,
we no longer explore"), the guided discount of each episode (section 5: (1 - exp(-beta_d k)) gamma, the
guidance weight in eq. 3 fading with it), and a Double DQN update every step."""

from __future__ import annotations

from dataclasses import dataclass, field

from hetflow.core.rl_router.dqn import DoubleDqn, DqnConfig
from hetflow.core.rl_router.reward import guided_discount
from simulator.rl_env import RoutingEnv


@dataclass(frozen=True)
class TrainConfig:
    episodes: int = 30
    gamma: float = 0.99
    beta_d: float = 0.5
    epsilon_start: float = 1.0
    epsilon_end: float = 0.0
    explore_episodes: int = 20
    max_steps: int = 20_000
    """An episode ends here even with requests left (an agent that only waits would never end one)."""
    dqn: DqnConfig = field(default_factory=DqnConfig)


@dataclass
class Episode:
    reward: float
    steps: int
    finished: int
    mean_latency_s: float


def epsilon(episode: int, cfg: TrainConfig) -> float:
    """Linear from ``epsilon_start`` to ``epsilon_end`` over the exploring episodes, then ``epsilon_end``."""
    if episode >= cfg.explore_episodes:
        return cfg.epsilon_end
    return cfg.epsilon_start + (cfg.epsilon_end - cfg.epsilon_start) * episode / cfg.explore_episodes


def run_episode(env: RoutingEnv, agent: DoubleDqn, k: int, cfg: TrainConfig, learn: bool = True) -> Episode:
    guided = guided_discount(k, cfg.gamma, cfg.beta_d)
    eps = epsilon(k, cfg) if learn else 0.0
    state, total, steps, done = env.reset(), 0.0, 0, False
    while not done and steps < cfg.max_steps:
        action = agent.act(state, eps)
        next_state, r, done = env.step(action, cfg.gamma, guided)
        if learn:
            agent.buffer.add(state, action, r, next_state, done)
            agent.learn(guided)
        state, total, steps = next_state, total + r, steps + 1
    latencies = env.latencies_s()
    return Episode(total, steps, len(latencies), sum(latencies.values()) / len(latencies) if latencies else 0.0)


def train(env: RoutingEnv, cfg: TrainConfig = TrainConfig(), seed: int = 0) -> tuple[DoubleDqn, list[Episode]]:
    agent = DoubleDqn(len(env.reset()), env.actions, cfg.dqn, seed)
    return agent, [run_episode(env, agent, k, cfg) for k in range(cfg.episodes)]
