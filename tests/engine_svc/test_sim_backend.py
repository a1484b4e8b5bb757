"""The real-time sim backend on a clock the test moves: every iteration ends when the profile (times the
time scale) says, a late wake is recorded as lag, and tokenized prompts reuse the prefix cache."""

from __future__ import annotations

import pytest

from engine_svc.backends.base import GenerateCall
from engine_svc.backends.sim import SimBackend, StepLag
from hetflow.core.call import SamplingSpec
from hetflow.core.engine.aging_queue import AgingPriorityQueue
from hetflow.core.engine.profile import load_profile
from hetflow.core.engine.request import EngineRequest
from hetflow.core.engine.scheduler import BatchScheduler, StepPlan
from tests.factories import MovedClock, wait_until

PROFILE = load_profile("qwen2.5-1.5b-instruct@a6000")


def call(request_id: str, token_ids: tuple[int, ...], max_tokens: int) -> GenerateCall:
    return GenerateCall(request_id, "", (), SamplingSpec(max_tokens=max_tokens, ignore_eos=True), 0.0,
                        prompt_token_ids=token_ids)


async def stream_times(backend: SimBackend, c: GenerateCall) -> list[tuple[float, int]]:
    return [(backend.clock.now(), delta.output_tokens) async for delta in backend.generate(c)]


def virtual_step_ends_s(prompt_tokens: int, max_tokens: int) -> list[float]:
    """The same request on the engine model in virtual time: each iteration's end after the start."""
    scheduler = BatchScheduler(PROFILE, AgingPriorityQueue())
    scheduler.add(EngineRequest("r", prompt_tokens, max_tokens, 0.0, 0.0, target_output_tokens=max_tokens))
    ends, now = [], 0.0
    while scheduler.has_work:
        plan = scheduler.schedule(now)
        now += plan.duration_s
        scheduler.update_from_step(plan, now)
        ends.append(now)
    return ends


@pytest.mark.parametrize("time_scale", [1.0, 4.0])
async def test_each_token_arrives_when_the_profile_times_the_scale_says(time_scale):
    clock, steps = MovedClock(), []
    backend = SimBackend("m", PROFILE, AgingPriorityQueue(), 64, clock, time_scale,
                         on_step=lambda plan, lag: steps.append(lag))
    await backend.start()
    start = clock.now()
    got = await stream_times(backend, call("r", tuple(range(300)), 6))
    await backend.close()
    expected = virtual_step_ends_s(300, 6)
    assert [tokens for _, tokens in got] == [1, 2, 3, 4, 5, 6]
    assert [t - start for t, _ in got] == pytest.approx([time_scale * e for e in expected], rel=1e-9)
    assert [lag.late_s for lag in steps] == pytest.approx([0.0] * len(expected), abs=1e-12)


async def test_a_late_wake_is_recorded_as_lag_and_made_up_after():
    clock, steps = MovedClock(oversleep_share=0.1), []
    backend = SimBackend("m", PROFILE, AgingPriorityQueue(), 64, clock, 1.0,
                         on_step=lambda plan, lag: steps.append(lag))
    await backend.start()
    start = clock.now()
    await stream_times(backend, call("r", tuple(range(100)), 4))
    await backend.close()
    assert len(steps) == 4 and all(isinstance(lag, StepLag) for lag in steps)
    assert steps[0].late_share == pytest.approx(0.1, rel=1e-6)  # the first sleep is the whole iteration
    # later iterations make the time up (shorter sleeps), so the run ends under 10% late overall
    assert clock.now() - start < 1.1 * sum(lag.duration_s for lag in steps)


async def test_an_iteration_whose_own_work_outlasts_its_profile_time_is_recorded_late():
    clock, steps = MovedClock(), []
    backend = SimBackend("m", PROFILE, AgingPriorityQueue(), 64, clock, 1.0,
                         on_step=lambda plan, lag: steps.append(lag))
    schedule = backend.scheduler.schedule

    def slow_schedule(now_s):  # the host spends 0.2 s deciding each batch, longer than any iteration here
        clock.now_s += 0.2
        return schedule(now_s)

    backend.scheduler.schedule = slow_schedule
    await backend.start()
    await stream_times(backend, call("r", tuple(range(100)), 4))
    await backend.close()
    # Each iteration took the host's 0.2 s where the profile says less: the difference is its lag, past the
    # catch-up window as within it.
    assert [lag.late_s for lag in steps] == pytest.approx([0.2 - lag.duration_s for lag in steps])
    assert all(lag.late_share > 1.0 for lag in steps)


async def test_a_tokenized_prompt_reuses_the_blocks_an_earlier_one_left_in_the_cache():
    clock, plans = MovedClock(), []
    backend = SimBackend("m", PROFILE, AgingPriorityQueue(), 64, clock,
                         on_step=lambda plan, lag: plans.append(plan))
    await backend.start()
    shared = tuple(range(10, 10 + 8 * PROFILE.block_size))
    await stream_times(backend, call("first", shared + (1, 2, 3), 2))
    hits_before = backend.scheduler.prefix_hit_tokens
    await stream_times(backend, call("second", shared + (4, 5, 6), 2))
    await backend.close()
    assert hits_before == 0
    assert backend.scheduler.prefix_hit_tokens == len(shared)  # every full block of the shared prefix
    second_prefill: StepPlan = plans[-2]
    assert second_prefill.prefill_tokens == 3  # only the new tail is computed


def test_a_time_scale_must_be_positive():
    with pytest.raises(ValueError, match="time_scale"):
        SimBackend("m", PROFILE, AgingPriorityQueue(), 64, MovedClock(), 0.0)


async def test_a_program_s_kv_is_kept_after_its_call_and_let_go_when_it_expires_on_an_idle_engine():
    """The balancer's retention (issue 35) reaches the engine model: the call's blocks stay held for its
    program, and an idle engine wakes at the expiry to let them go (its reports stop counting them)."""
    clock = MovedClock()
    backend = SimBackend("m", PROFILE, AgingPriorityQueue(), 64, clock)
    await backend.start()
    kept = GenerateCall("p/1", "", (), SamplingSpec(max_tokens=4, ignore_eos=True), 0.0, program_id="p",
                        prompt_token_ids=tuple(range(300)), retain_kv_s=5.0)
    finished_at = (await stream_times(backend, kept))[-1][0]
    await wait_until(lambda: backend.scheduler.retained_released["expired"] == 1)
    assert backend.status().kv_cache_usage == 0.0 and not backend.scheduler.retained_until_s
    assert clock.now() == pytest.approx(finished_at + 5.0, abs=0.002)  # asleep until the expiry (then one idle ms)
    again = await stream_times(backend, call("p/2", tuple(range(300)), 1))
    await backend.close()
    assert again and backend.scheduler.prefix_hit_tokens > 0  # the freed blocks stay cached until evicted


def test_no_run_of_filler_words_reads_as_a_judges_rating():
    """A cascade's LLM judge on sim engines must never find a rating in filler (it gets one or two tokens)."""
    from engine_svc.backends.sim import _WORDS
    from hetflow.core.cascade.judge_prompt import parse_grade

    for first in _WORDS:
        for second in _WORDS:
            with pytest.raises(ValueError, match="no rating"):
                parse_grade(f" {first} {second}")
