"""Alpha tuning on the live balancer (HexGen-Flow 4.3): workflows' latencies fill the windows; a
regression replays the window's programs, rebuilt from the calls seen, and sets the best alpha."""

import asyncio
import random
from concurrent.futures import ThreadPoolExecutor

import pytest

from balancer_svc.live_alpha import LiveAlphaTuning, SeenCall, SeenProgram, replay_trace
from hetflow.core.engine.profile import load_profile
from hetflow.core.pipeline import Pipeline
from hetflow.core.presets import resolve
from simulator.tuning import replay_best_alpha
from tests.factories import call, engine

MODEL = "qwen2.5-7b-instruct"


def seen(sent_s: float, finished_s: float) -> SeenCall:
    return SeenCall("agent", "", 400, 100, sent_s, finished_s)


def test_replay_trace_rebuilds_each_program_from_the_calls_seen():
    fan_out = SeenProgram("sql", "gold", 110.0, 150.0,
                          [seen(110.0, 112.0), seen(112.0, 115.0), seen(112.0, 114.0), seen(115.5, 118.0)],
                          finished_unix_s=118.0)
    too_early = SeenProgram("sql", "gold", 90.0, 0.0, [seen(90.0, 95.0)], finished_unix_s=95.0)
    unfinished = SeenProgram("sql", "gold", 120.0, 0.0, [seen(120.0, 125.0)])
    records, deadlines = replay_trace({"a": fan_out, "b": too_early, "c": unfinished}, 100.0, ["m1", "m2"])
    assert [r.program_id for r in records] == ["a"] * 4
    assert [r.depends_on for r in records] == [[], [1], [1], [1, 2, 3]]
    assert {r.arrival_s for r in records} == {10.0} and deadlines == {"a": 50.0}
    assert all(r.input_tokens == {"m1": 400, "m2": 400} and r.output_tokens == {"m1": 100, "m2": 100}
               for r in records)


def feed(tuning, views, start_s, end_s, latency_scale, rng):
    """Two-call programs, one every second, whose end-to-end latency is ``latency_scale`` x noise."""
    for i, t in enumerate(range(int(start_s), int(end_s))):
        pid = f"p{t}"
        latency = latency_scale * rng.lognormvariate(0, 0.2)
        view = views[i % len(views)]
        for level, (sent, done) in enumerate([(t, t + latency / 2), (t + latency / 2, t + latency)], 1):
            c = call(program_id=pid, workflow="sql", agent=f"a{level}", stage_index=level, stage_count=2)
            tuning.call_finished(c, view, float(t), 1500, 300, sent, done)


def views():
    kv = {"kv_capacity_tokens": 12000}
    return [engine("l4-0", MODEL, engine_profile=load_profile(f"{MODEL}@l4", **kv)),
            engine("a100-0", MODEL, engine_profile=load_profile(f"{MODEL}@a100-80g", **kv))]


def test_a_regressed_window_replays_and_sets_the_alpha_of_lowest_p95():
    pipeline = Pipeline(resolve("hexgen").policy)

    async def scenario():
        tuning = LiveAlphaTuning(pipeline.store, resolve("hexgen").policy, window_s=100.0,
                                 replay=replay_best_alpha, executor=ThreadPoolExecutor(1))
        rng = random.Random(3)
        feed(tuning, views(), 0, 200, 10.0, rng)
        assert tuning.retuning is None and not tuning.changes
        feed(tuning, views(), 200, 300, 30.0, rng)            # latencies triple: the next window to close regresses
        assert tuning.retuning is not None
        await tuning.retuning
        tuning.close()
        return tuning

    tuning = asyncio.run(scenario())
    assert [test.regressed for _, test in tuning.tuner.history] == [False, True]
    (_, alpha, p95_by_alpha), = tuning.changes
    assert alpha == min(p95_by_alpha, key=lambda a: (p95_by_alpha[a], a)) and len(p95_by_alpha) == 11
    assert pipeline.store.alpha == alpha == tuning.tuner.alpha and tuning.retuning is None


class BrokenPool(ThreadPoolExecutor):
    """A pool whose worker died: every submission raises at once, as ``ProcessPoolExecutor``'s does."""

    def submit(self, *args, **kwargs):
        from concurrent.futures.process import BrokenProcessPool

        raise BrokenProcessPool("a replay's worker died")


def test_a_retuning_whose_pool_broke_fails_no_call_and_the_pool_is_made_anew():
    """The call whose workflow's end asked for the re-tuning is relayed whole: the broken pool is dropped
    (the next re-tuning makes a fresh one) and the alpha kept."""
    async def scenario():
        pipeline = Pipeline(resolve("hexgen").policy)
        tuning = LiveAlphaTuning(pipeline.store, resolve("hexgen").policy, window_s=100.0,
                                 replay=replay_best_alpha, executor=BrokenPool(1))
        rng = random.Random(3)
        feed(tuning, views(), 0, 200, 10.0, rng)
        feed(tuning, views(), 200, 300, 30.0, rng)   # a regression: the re-tuning's submission raises
        assert [t.regressed for _, t in tuning.tuner.history] == [False, True]
        assert tuning.retuning is None and tuning._executor is None and not tuning.changes
        tuning.close()

    asyncio.run(scenario())


def test_unchanged_windows_never_replay():
    async def scenario():
        tuning = LiveAlphaTuning(Pipeline(resolve("hexgen").policy).store, resolve("hexgen").policy,
                                 window_s=100.0, replay=replay_best_alpha, executor=ThreadPoolExecutor(1))
        feed(tuning, views(), 0, 450, 10.0, random.Random(4))
        tuning.close()
        return tuning

    tuning = asyncio.run(scenario())
    assert len(tuning.tuner.history) == 3 and not any(t.regressed for _, t in tuning.tuner.history)
    assert tuning.retuning is None and not tuning.changes


def test_the_packer_ranking_by_eq4_is_tuned_and_other_pickers_are_refused():
    hetflow = resolve("hetflow-card").policy
    tuning = LiveAlphaTuning(Pipeline(hetflow).store, hetflow, window_s=100.0, replay=replay_best_alpha)
    assert tuning.tuner.alpha == 0.0
    with pytest.raises(ValueError, match="alpha"):
        LiveAlphaTuning(Pipeline(resolve("chimera").policy).store, resolve("chimera").policy, 100.0,
                        replay_best_alpha)
