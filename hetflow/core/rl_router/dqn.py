"""Double DQN (load-balancer paper, C.10.3; van Hasselt et al. 2016) for the RL router: a network of layers
(state, 64), (64, 64), (64, actions) with ReLU after the first two, trained from a replay buffer in batches
of 512 with a target network; the online network picks the next action, the target network values it.
Actions are the instances and, last, "no action" (4.3). The discount is the guided one of the episode
(``hetflow.core.rl_router.reward.guided_discount``).

Two networks: ``mlp``, C.10.3's as printed, and ``shared`` (the default), one small network that scores
every instance from the queue's values, that instance's row and the mean of all rows, and a second that
scores no action from the queue's values and the rows' mean and minimum. The paper's instances are
homogeneous (4.3); the shared network makes that an identity (relabelling the instances relabels the
Q-values, nothing else), and each instance's transitions teach the others'. On the paper's MLP the
greedy agent favoured some instances over others after training (docs/rl-router.md).

The agent chooses among the actions offered (``hetflow.core.rl_router.hold.offered_actions``), and the
target's next action is the online network's best among those offered at the next state.

Transitions marked as demonstrations (a heuristic's, ``simulator.rl_train``) add DQfD's large-margin loss
(Hester et al. 2018, eq. 2) to the TD loss.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import nn

from hetflow.core.rl_router.state import QUEUE_VALUES


@dataclass(frozen=True)
class DqnConfig:
    hidden: int = 64
    architecture: str = "shared"
    """``mlp`` (C.10.3) or ``shared`` (module docstring)."""
    batch_size: int = 512
    learning_rate: float = 3e-4
    """Not in the paper; 3e-4 trained steadier than 1e-3 on the training requests (docs/rl-router.md)."""
    buffer_size: int = 100_000
    target_sync_updates: int = 200
    """Updates between copies of the online network into the target network."""
    expert_margin: float = 0.8
    """Demonstrations' large-margin loss (DQfD, Hester et al. 2018, eq. 2): every other action's Q is
    pushed this far below the demonstrated one's."""
    expert_weight: float = 1.0
    """lambda_2 of DQfD's loss: the margin loss's weight beside the TD loss."""


class QNetwork(nn.Module):
    def __init__(self, state_dim: int, actions: int, hidden: int = 64) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(state_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                    nn.Linear(hidden, actions))

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        return self.layers(states)


class SharedInstanceQNetwork(nn.Module):
    """Q(s, instance i) = f(queue, row_i, mean of rows); Q(s, none) = g(queue, mean of rows, min of rows);
    f and g have C.10.3's layers, (inputs, hidden), (hidden, hidden), (hidden, 1)."""

    def __init__(self, state_dim: int, actions: int, hidden: int = 64) -> None:
        super().__init__()
        self.instances = actions - 1
        self.width = (state_dim - QUEUE_VALUES) // max(1, self.instances)
        if self.instances < 1 or self.width < 1 or QUEUE_VALUES + self.instances * self.width != state_dim:
            raise ValueError(f"a state of {state_dim} values does not split into {QUEUE_VALUES} queue values "
                             f"and {self.instances} instance rows")
        self.instance = _mlp(QUEUE_VALUES + 2 * self.width, hidden)
        self.none = _mlp(QUEUE_VALUES + 2 * self.width, hidden)

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        queue = states[:, :QUEUE_VALUES]
        rows = states[:, QUEUE_VALUES:].reshape(len(states), self.instances, self.width)
        mean = rows.mean(dim=1)
        per_instance = torch.cat([queue.unsqueeze(1).expand(-1, self.instances, -1), rows,
                                  mean.unsqueeze(1).expand(-1, self.instances, -1)], dim=2)
        q_instances = self.instance(per_instance).squeeze(2)
        q_none = self.none(torch.cat([queue, mean, rows.min(dim=1).values], dim=1))
        return torch.cat([q_instances, q_none], dim=1)


def _mlp(inputs: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, 1))


ARCHITECTURES = {"mlp": QNetwork, "shared": SharedInstanceQNetwork}


def q_network(architecture: str, state_dim: int, actions: int, hidden: int) -> nn.Module:
    """The Q-network ``architecture`` names (module docstring); ValueError for an unknown one."""
    if architecture not in ARCHITECTURES:
        raise ValueError(f"unknown Q-network architecture {architecture!r}; known: {sorted(ARCHITECTURES)}")
    return ARCHITECTURES[architecture](state_dim, actions, hidden)


class ReplayBuffer:
    def __init__(self, state_dim: int, actions: int, size: int) -> None:
        self.states = np.zeros((size, state_dim), dtype=np.float32)
        self.next_states = np.zeros((size, state_dim), dtype=np.float32)
        self.next_offered = np.ones((size, actions), dtype=bool)
        self.actions = np.zeros(size, dtype=np.int64)
        self.rewards = np.zeros(size, dtype=np.float32)
        self.done = np.zeros(size, dtype=np.float32)
        self.steps = np.ones(size, dtype=np.float32)
        self.expert = np.zeros(size, dtype=np.float32)
        self.td = np.ones(size, dtype=np.float32)
        self.size, self.count, self._next = size, 0, 0

    def add(self, state: Sequence[float], action: int, reward: float, next_state: Sequence[float], done: bool,
            steps: int = 1, expert: bool = False, label_only: bool = False,
            next_offered: Sequence[int] | None = None) -> None:
        """One transition; ``steps``: the environment steps it spans (a decision whose successor came
        ``steps`` steps later, its ``reward`` already discounted over them), so the next state's value is
        discounted by gamma ** steps; ``expert``: a demonstration's (its action taught with a margin);
        ``label_only``: a teacher's action at a state the agent visited, taught by the margin alone (its
        reward and next state are those of the agent's own action, so the TD loss skips it);
        ``next_offered``: the actions offered at the next state (all by default)."""
        i = self._next
        self.next_offered[i] = next_offered is None
        if next_offered is not None:
            self.next_offered[i, list(next_offered)] = True
        self.states[i], self.actions[i], self.rewards[i] = state, action, reward
        self.next_states[i], self.done[i], self.steps[i] = next_state, float(done), steps
        self.expert[i], self.td[i] = float(expert), float(not label_only)
        self._next = (i + 1) % self.size
        self.count = min(self.count + 1, self.size)

    def sample(self, n: int, rng: np.random.Generator) -> tuple[torch.Tensor, ...]:
        idx = rng.integers(0, self.count, size=min(n, self.count))
        return (torch.from_numpy(self.states[idx]), torch.from_numpy(self.actions[idx]),
                torch.from_numpy(self.rewards[idx]), torch.from_numpy(self.next_states[idx]),
                torch.from_numpy(self.done[idx]), torch.from_numpy(self.steps[idx]), torch.from_numpy(self.expert[idx]),
                torch.from_numpy(self.td[idx]), torch.from_numpy(self.next_offered[idx]))


class DoubleDqn:
    def __init__(self, state_dim: int, actions: int, cfg: DqnConfig = DqnConfig(), seed: int = 0) -> None:
        torch.manual_seed(seed)
        self.cfg, self.state_dim, self.actions = cfg, state_dim, actions
        self.online = q_network(cfg.architecture, state_dim, actions, cfg.hidden)
        self.target = q_network(cfg.architecture, state_dim, actions, cfg.hidden)
        self.target.load_state_dict(self.online.state_dict())
        self.optimizer = torch.optim.Adam(self.online.parameters(), lr=cfg.learning_rate)
        self.buffer = ReplayBuffer(state_dim, actions, cfg.buffer_size)
        self._rng = np.random.default_rng(seed)
        self.random = random.Random(seed)
        self.updates = 0

    def q_values(self, state: Sequence[float]) -> list[float]:
        with torch.no_grad():
            return [float(q) for q in self.online(torch.tensor([state], dtype=torch.float32))[0]]

    def act(self, state: Sequence[float], epsilon: float = 0.0, offered: Sequence[int] | None = None) -> int:
        """Epsilon-greedy among the ``offered`` actions (all by default; the last is none, 4.3): a random
        one with probability ``epsilon``, else the highest Q."""
        offered = list(range(self.actions)) if offered is None else list(offered)
        if self.random.random() < epsilon:
            return self.random.choice(offered)
        q = self.q_values(state)
        return max(offered, key=lambda a: q[a])

    def learn(self, gamma: float) -> float:
        """One update on a batch from the buffer; the loss (0 before there is anything to learn from)."""
        if self.buffer.count == 0:
            return 0.0
        (states, actions, rewards, next_states, done, steps, expert, td,
         next_offered) = self.buffer.sample(self.cfg.batch_size, self._rng)
        with torch.no_grad():  # the online net chooses among the actions offered, the target net values it
            next_actions = self.online(next_states).masked_fill(~next_offered, -torch.inf).argmax(dim=1, keepdim=True)
            next_q = self.target(next_states).gather(1, next_actions).squeeze(1)
            target = rewards + gamma ** steps * (1.0 - done) * next_q
        all_q = self.online(states)
        q = all_q.gather(1, actions.unsqueeze(1)).squeeze(1)
        loss = (nn.functional.smooth_l1_loss(q, target, reduction="none") * td).sum() / td.sum().clamp(min=1.0)
        if expert.any():  # DQfD's eq. 2: max_a [Q(s, a) + margin (a != a_E)] - Q(s, a_E), on demonstrations
            margins = torch.full_like(all_q, self.cfg.expert_margin).scatter(1, actions.unsqueeze(1), 0.0)
            large_margin = ((all_q + margins).max(dim=1).values - q) * expert
            loss = loss + self.cfg.expert_weight * large_margin.sum() / expert.sum()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.updates += 1
        if self.updates % self.cfg.target_sync_updates == 0:
            self.target.load_state_dict(self.online.state_dict())
        return float(loss.detach())
