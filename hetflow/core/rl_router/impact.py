"""The workload impact estimator (load-balancer paper, 4.2, eq. 1-2) and the guidance term of the reward
(eq. 4). Gradients come from the engine's profile: grad_1 is the batch time added per prefill token
(``prefill_ms_per_token``), grad_2 the iteration time added per token of the decoding sequences' context
(``decode_ms_per_batch_token``); the paper's 3.2e-4 and 3.3e-5 s are Llama-2-7B's on a V100."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from hetflow.core.engine.profile import EngineProfile


@dataclass(frozen=True)
class Gradients:
    prompt_s_per_token: float
    """grad_1."""
    decode_s_per_token: float
    """grad_2."""

    @classmethod
    def of(cls, profile: EngineProfile) -> Gradients:
        return cls(profile.prefill_ms_per_token / 1e3, profile.decode_ms_per_batch_token / 1e3)


@dataclass(frozen=True)
class Running:
    """A request at an instance: p_j^m prompt and d_j^m decode tokens processed so far."""

    prompt_tokens: int
    decode_tokens: int


def prompt_time_s(prompt_tokens: int, running: Sequence[Running], grad: Gradients) -> float:
    """Eq. 1: T_{p_i}^m = grad_1 * (p_i^2 + sum_j (p_j^m + d_j^m)), as written."""
    return grad.prompt_s_per_token * (prompt_tokens ** 2 + sum(r.prompt_tokens + r.decode_tokens for r in running))


def prompt_reward(prompt_time: float, epsilon_s: float) -> float:
    """Eq. 1: r_{p_i}^m = 1 if T <= epsilon, else 1 - T / epsilon."""
    return 1.0 if prompt_time <= epsilon_s else 1.0 - prompt_time / epsilon_s


def decode_reward(prompt_tokens: int, decode_tokens: int, running: Sequence[Running], grad: Gradients) -> float:
    """Eq. 2: r_d^m = -grad_2 * (sum_j (p_j^m + d_j^m) + p_i + d_i). The paper prints the new request's
    tokens outside the product; read so, r_d would be hundreds of tokens, not the [-1, 1] the paper
    expects of it, so they are taken inside: the tokens the instance holds once the request joins."""
    held = sum(r.prompt_tokens + r.decode_tokens for r in running) + prompt_tokens + decode_tokens
    return -grad.decode_s_per_token * held


def mixing_reward(prompt_tokens: int, decode_tokens: int, running: Sequence[Running], grad: Gradients,
                  epsilon_s: float, alpha: float = 0.5) -> float:
    """r_mixing = alpha r_p + (1 - alpha) r_d (4.2; alpha 0.5 in section 5)."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    return (alpha * prompt_reward(prompt_time_s(prompt_tokens, running, grad), epsilon_s)
            + (1.0 - alpha) * decode_reward(prompt_tokens, decode_tokens, running, grad))


def guidance(chosen: float, alternatives: Sequence[float]) -> float:
    """Eq. 4: h = r_mixing(s_t, s_{t+1}) - max_l r_mixing(s_t, s_{t+1}^l): 0 when the request went to the
    instance it disturbs least, negative otherwise."""
    return chosen - max(alternatives)
