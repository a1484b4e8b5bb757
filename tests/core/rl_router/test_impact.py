"""The workload impact estimator (eq. 1-2) and the guided reward (eq. 3-4) on handmade states."""

import math

import pytest

from hetflow.core.engine.profile import load_profile
from hetflow.core.rl_router.impact import (
    Gradients,
    Running,
    decode_reward,
    guidance,
    mixing_reward,
    prompt_reward,
    prompt_time_s,
)
from hetflow.core.rl_router.reward import Progress, guided_discount, reward

PAPER = Gradients(3.2e-4, 3.3e-5)  # Llama-2-7B on a V100 (section 3)
BUSY = [Running(100, 50), Running(200, 150)]  # 500 tokens held


def test_gradients_come_from_the_profile():
    profile = load_profile("qwen2.5-7b-instruct@a6000")
    grad = Gradients.of(profile)
    assert grad.prompt_s_per_token == profile.prefill_ms_per_token / 1e3
    assert grad.decode_s_per_token == profile.decode_ms_per_batch_token / 1e3


def test_eq1_prompt_time_and_its_penalty_past_epsilon():
    assert prompt_time_s(10, BUSY, PAPER) == pytest.approx(3.2e-4 * (100 + 500))
    assert prompt_reward(0.1, epsilon_s=0.2) == 1.0
    assert prompt_reward(0.3, epsilon_s=0.2) == pytest.approx(1 - 0.3 / 0.2)


def test_eq2_decode_penalty_grows_with_the_tokens_the_instance_holds():
    assert decode_reward(10, 40, BUSY, PAPER) == pytest.approx(-3.3e-5 * (500 + 50))
    assert decode_reward(10, 40, [], PAPER) > decode_reward(10, 40, BUSY, PAPER)


def test_mixing_weighs_both_and_guidance_is_zero_only_for_the_least_disturbed_instance():
    idle = mixing_reward(300, 100, [], PAPER, epsilon_s=0.5)
    busy = mixing_reward(300, 100, BUSY * 20, PAPER, epsilon_s=0.5)
    assert idle > busy
    assert guidance(idle, [idle, busy]) == 0.0 and guidance(busy, [idle, busy]) < 0.0
    with pytest.raises(ValueError):
        mixing_reward(1, 1, [], PAPER, epsilon_s=1.0, alpha=1.0)


def test_eq3_rewards_completions_penalises_waiting_and_a_worse_choice_less_as_guidance_fades():
    waiting = [Progress(ideal_s=2.0, done_share=0.5), Progress(ideal_s=4.0, done_share=0.0)]
    base = reward(waiting, completed=0, completion_reward=60, guidance_h=0.0, gamma=0.99, guided_gamma=0.5)
    assert base == pytest.approx(-(0.5 / 2.0 + 1.0 / 4.0))
    assert reward(waiting, 1, 60, 0.0, 0.99, 0.5) == pytest.approx(base + 60)
    early = reward(waiting, 0, 60, -1.0, 0.99, guided_discount(0, 0.99))
    late = reward(waiting, 0, 60, -1.0, 0.99, guided_discount(10, 0.99))
    assert early < late < base  # a worse choice is penalised, less as the guidance fades
    assert guided_discount(0, 0.99) == 0.0 and guided_discount(10, 0.99) == pytest.approx(0.99 * (1 - math.exp(-5)))
