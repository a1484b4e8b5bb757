"""The heuristic-guided reward (load-balancer paper, 4.3, eq. 3) and its guidance schedule.

Section 5 sets lambda_k = exp(-beta_d k) (beta_d = 0.5) and the training discount to
gamma-hat_k = (1 - exp(-beta_d k)) gamma, so the guidance weight gamma - gamma-tilde_k = lambda_k gamma
fades with the episodes ("heuristics should only be employed as a warm start"), as in the heuristic-guided
RL it cites (Cheng et al. 2021). Eq. 4's h is <= 0 (the chosen instance's r_mixing minus the best one's),
and the text calls it a penalty: the guidance term is therefore added as (gamma - gamma-tilde_k) h, which
lowers the reward of a choice that disturbs its instance more than another would; eq. 3's printed minus
sign would reward it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Progress:
    """A request the reward counts (scheduled or waiting): its ideal time T-hat_j and the share of its
    estimated decode tokens produced so far, f_jt = o_jt / d-hat_jt."""

    ideal_s: float
    done_share: float


def guided_discount(episode: int, gamma: float, beta_d: float = 0.5) -> float:
    """gamma-tilde_k = (1 - lambda_k) gamma, lambda_k = exp(-beta_d k) (section 5): the discount the agent
    trains with in episode k (0-based)."""
    return (1.0 - math.exp(-beta_d * episode)) * gamma


def reward(requests: Sequence[Progress], completed: int, completion_reward: float, guidance_h: float,
           gamma: float, guided_gamma: float) -> float:
    """Eq. 3: -sum_j (1 / T-hat_j)(1 - f_jt) + r_w x (requests completed this step) + the guidance term
    (gamma - gamma-tilde_k) h (module docstring). ``completion_reward``: r_w (60 in C.10.3)."""
    waiting = sum((1.0 - min(1.0, r.done_share)) / r.ideal_s for r in requests if r.ideal_s > 0)
    return -waiting + completion_reward * completed + (gamma - guided_gamma) * guidance_h
