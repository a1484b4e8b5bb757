"""Training the RL router in the simulator (load-balancer paper, 4.3, 5, C.10): episodes of the routing
environment, epsilon-greedy exploration that ends after ``explore_episodes`` (C.10.2: "after episode 20,
we no longer explore"), the guided discount of each episode (section 5: (1 - exp(-beta_d k)) gamma, the
guidance weight in eq. 3 fading with it), and a Double DQN update after every decision.

The agent decides each request as it arrives and each held one at every round (``simulator.rl_env``); a
decision's successor is the next decision's state, and the steps between them (none for two decisions at
one instant) add their rewards, discounted, to it (a semi-Markov step of ``steps`` environment steps, so
the next state's value is discounted by time, not by how many decisions came between). Rewards
are multiplied by ``reward_scale``, which leaves the best policy unchanged and keeps the Q-values near 1
(eq. 3's waiting term sums over every request in the system at every 0.02 s step).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from hetflow.core.rl_router.dqn import DoubleDqn, DqnConfig
from hetflow.core.rl_router.policy_file import RlPolicy
from hetflow.core.rl_router.reward import guided_discount
from hetflow.core.rl_router.state import permute_actions, permute_instances
from hetflow.core.trace import StageRecord
from simulator.rl_env import RoutedRequest, RoutingEnv


@dataclass(frozen=True)
class TrainConfig:
    episodes: int = 30
    gamma: float = 0.99
    beta_d: float = 0.5
    epsilon_start: float = 1.0
    epsilon_end: float = 0.0
    explore_episodes: int = 20
    reward_scale: float = 0.01
    relabelled_copies: int = 0
    """Each transition is also remembered this many times with its instances relabelled (a random
    permutation of the state's rows and the action), the same situation on homogeneous instances (4.3):
    for the paper's ``mlp`` network; the ``shared`` one gives relabelled states relabelled Q-values."""
    demonstration_episodes: int = 0
    """The first episodes are maximum capacity usage's (C.3.2), remembered as demonstrations and learned
    from with DQfD's large-margin loss (Hester et al. 2018), a warm start from a heuristic as the paper
    puts guidance ("heuristics should only be employed as a warm start"); exploration and the guided
    discount count on from there."""
    teacher_labels: bool = False
    """After the demonstrations, the teacher's action at every state the agent decides in is remembered
    too, as a label its margin loss teaches (DAgger, Ross et al. 2011): once the agent strays from the
    teacher (a call sent to a full engine), it meets states the demonstrations never showed."""
    validate_every: int = 1
    """Episodes between greedy, frozen runs on the validation requests (the network kept is chosen there)."""
    tail_steps: int = 300
    """Once every request is routed, the last decision's rewards are counted this many steps more
    (gamma ** 300 is 0.05), then the engines run to the end uncounted."""
    dqn: DqnConfig = field(default_factory=DqnConfig)


@dataclass
class Episode:
    reward: float
    """Eq. 3's reward summed over the episode's steps, unscaled."""
    steps: int
    decisions: int
    finished: int
    mean_latency_s: float


def epsilon(episode: int, cfg: TrainConfig) -> float:
    """Linear from ``epsilon_start`` to ``epsilon_end`` over the exploring episodes, then ``epsilon_end``."""
    if episode >= cfg.explore_episodes:
        return cfg.epsilon_end
    return cfg.epsilon_start + (cfg.epsilon_end - cfg.epsilon_start) * episode / cfg.explore_episodes


@dataclass
class _Pending:
    """A decision whose successor state is not known yet: its reward accumulates, discounted."""

    state: list[float]
    action: int
    expert: bool
    reward: float = 0.0
    steps: int = 0


def run_episode(env: RoutingEnv, agent: DoubleDqn, k: int, cfg: TrainConfig, learn: bool = True) -> Episode:
    """Episode ``k``: the teacher's while ``k < cfg.demonstration_episodes`` and learning, else the agent's
    (epsilon-greedy while learning, greedy otherwise)."""
    guided = guided_discount(k, cfg.gamma, cfg.beta_d)
    eps = epsilon(k, cfg) if learn else 0.0
    teaching = learn and k < cfg.demonstration_episodes
    state, total, steps, decisions = env.reset(), 0.0, 0, 0
    pending: _Pending | None = None
    while True:
        if env.deciding is None:
            if env.done or (not env.routing_left and (pending is None or pending.steps >= cfg.tail_steps)):
                env.run_to_end()
                break
            state, r, _ = env.advance()
            if pending is not None:
                pending.reward += guided ** pending.steps * r * cfg.reward_scale
                pending.steps += 1
            total, steps = total + r, steps + 1
            continue
        if pending is not None and learn:
            _remember(agent, env, pending, state, False, cfg, guided)
        action = (env.max_capacity_action() if teaching
                  else agent.act(state, eps, env.offered()))
        if learn and cfg.teacher_labels and not teaching:
            agent.buffer.add(state, env.max_capacity_action(), 0.0, state, True, 1,
                             expert=True, label_only=True)
        pending, decisions = _Pending(state, action, teaching), decisions + 1
        state, r = env.decide(action, cfg.gamma, guided)
        pending.reward += r * cfg.reward_scale
        total += r
    if pending is not None and learn:
        _remember(agent, env, pending, state, True, cfg, guided)
    latencies = env.latencies_s()
    return Episode(total, steps, decisions, len(latencies),
                   sum(latencies.values()) / len(latencies) if latencies else 0.0)


def _remember(agent: DoubleDqn, env: RoutingEnv, pending: _Pending, next_state: list[float], done: bool,
              cfg: TrainConfig, gamma: float) -> None:
    """Remember ``pending`` with its successor, ``next_state``, the state of the decision now (the actions
    offered there are the environment's now)."""
    offered = env.offered()
    agent.buffer.add(pending.state, pending.action, pending.reward, next_state, done, pending.steps, pending.expert,
                     next_offered=offered)
    instances = env.no_action
    for _ in range(cfg.relabelled_copies):
        order = agent.random.sample(range(instances), instances)  # row j of the copy is instance order[j]
        action, *next_offered = permute_actions([pending.action, *offered], order)
        agent.buffer.add(permute_instances(pending.state, order, env.buckets), action, pending.reward,
                         permute_instances(next_state, order, env.buckets), done, pending.steps, pending.expert,
                         next_offered=next_offered)
    agent.learn(gamma)


def train(env: RoutingEnv, cfg: TrainConfig = TrainConfig(), seed: int = 0, validation: RoutingEnv | None = None,
          on_episode: Callable[[int, Episode, Episode | None], None] = lambda k, e, v: None,
          ) -> tuple[DoubleDqn, list[Episode]]:
    """The agent after ``cfg.episodes`` episodes, its online network set to the one that served the
    ``validation`` requests (by default the training ones) best: every ``validate_every`` episodes the
    network runs them greedily and frozen, as the balancer serves it, and the lowest mean latency with
    every request finished is kept (the last network when no run finished them all). Learning goes on
    in every episode and does not only improve (C.10.2's figure 9 too shows rewards falling back), and
    an exploring episode's latency says little of the greedy policy's, so the kept network is chosen on
    how it will be used."""
    agent = DoubleDqn(len(env.reset()), env.actions, cfg.dqn, seed)
    validation = validation or env
    episodes: list[Episode] = []
    best_latency_s, best_weights = float("inf"), None
    for k in range(cfg.episodes):
        episodes.append(run_episode(env, agent, k, cfg))
        checked = None
        if (k + 1) % cfg.validate_every == 0 or k == cfg.episodes - 1:
            checked = run_episode(validation, agent, k, cfg, learn=False)
            if checked.finished == len(validation.requests) and checked.mean_latency_s < best_latency_s:
                best_latency_s, best_weights = checked.mean_latency_s, copy.deepcopy(agent.online.state_dict())
        on_episode(k, episodes[-1], checked)
    if best_weights is not None:
        agent.online.load_state_dict(best_weights)
    return agent, episodes


def routed_requests(records: Sequence[StageRecord], model: str) -> list[RoutedRequest]:
    """The environment's requests from one-call programs (``hetflow.workloads.requests``), with the true
    decode length as the router's estimate (the oracle every policy of the benchmark is given)."""
    return [RoutedRequest(r.program_id, r.arrival_s, r.input_tokens[model], r.output_tokens[model],
                          float(r.output_tokens[model])) for r in records]


def to_policy(agent: DoubleDqn, env: RoutingEnv, trained_on: Mapping[str, Any]) -> RlPolicy:
    """The agent's online network as a policy file for the balancer's ``rl-router``."""
    models = {s.model for s in env.specs}
    if len(models) != 1:
        raise ValueError(f"the RL router routes among instances of one model, got {sorted(models)}")
    return RlPolicy(tuple(s.engine_id for s in env.specs), models.pop(), env.buckets, env.step_s, env.max_model_len,
                    agent.cfg.hidden, agent.online.state_dict(), dict(trained_on), agent.cfg.architecture)


def round_robin_episode(env: RoutingEnv) -> Episode:
    """The paper's baseline in the same environment: each request, as it arrives, to the next instance in
    turn."""
    env.reset()
    total, steps, decisions = 0.0, 0, 0
    while not env.done:
        if env.deciding is not None:
            env.decide(decisions % env.no_action)
            decisions += 1
        elif env.routing_left:
            _, r, _ = env.advance()
            total, steps = total + r, steps + 1
        else:
            env.run_to_end()
    latencies = env.latencies_s()
    return Episode(total, steps, decisions, len(latencies), sum(latencies.values()) / len(latencies))
