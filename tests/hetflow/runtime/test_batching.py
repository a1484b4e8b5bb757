"""The batch collector: concurrent calls share batches, order is kept, failures reach every caller."""

import asyncio
import concurrent.futures
import threading

import pytest

from hetflow.runtime.batching import BatchCollector

calls: list[list[int]] = []


def double(items: list[int]) -> list[int]:
    calls.append(list(items))
    return [2 * i for i in items]


def broken(items: list[int]) -> list[int]:
    raise RuntimeError("model exploded")


@pytest.fixture
def executor():
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        yield ex


async def test_concurrent_submits_are_batched_and_answered_in_order(executor):
    calls.clear()
    collector = BatchCollector(double, max_batch_size=8, max_wait_s=0.05, executor=executor)
    results = await asyncio.gather(*(collector.submit([i, i + 100]) for i in range(4)))
    await collector.close()
    assert results == [[2 * i, 2 * (i + 100)] for i in range(4)]
    assert max(len(c) for c in calls) == 8 and collector.largest_batch == 8   # all 8 items in one batch


async def test_batches_never_exceed_the_maximum(executor):
    calls.clear()
    collector = BatchCollector(double, max_batch_size=3, max_wait_s=0.01, executor=executor)
    assert await collector.submit(list(range(10))) == [2 * i for i in range(10)]
    await collector.close()
    assert all(len(c) <= 3 for c in calls) and sum(len(c) for c in calls) == 10


async def test_empty_submit_returns_empty_and_failures_reach_callers(executor):
    collector = BatchCollector(broken, max_batch_size=4, max_wait_s=0.0, executor=executor)
    assert await collector.submit([]) == []
    with pytest.raises(RuntimeError, match="exploded"):
        await collector.submit([1, 2])
    await collector.close()


async def test_closing_fails_every_caller_still_waiting_unavailable():
    from hetflow.core.errors import Unavailable

    started, release = threading.Event(), threading.Event()

    def slow(items):
        started.set()
        release.wait(10)
        return items

    pool = concurrent.futures.ThreadPoolExecutor(1)
    collector = BatchCollector(slow, 1, 0.0, pool)
    running = asyncio.ensure_future(collector.submit([1]))   # its batch runs when the collector closes
    queued = asyncio.ensure_future(collector.submit([2]))    # its batch waits behind it
    await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
    await collector.close()
    release.set()
    for caller in (running, queued):
        with pytest.raises(Unavailable, match="stopping"):
            await asyncio.wait_for(caller, 10)
    pool.shutdown()


async def test_a_broken_worker_pool_is_unavailable_and_replaced_for_the_next_batch():
    from hetflow.core.errors import Unavailable

    class Broken(concurrent.futures.Executor):
        shut = False

        def submit(self, fn, /, *args, **kwargs):
            raise concurrent.futures.BrokenExecutor("a worker died")

        def shutdown(self, wait=True, *, cancel_futures=False):
            Broken.shut = True

    fresh = concurrent.futures.ThreadPoolExecutor(1)
    entered, starting = asyncio.Event(), asyncio.Event()

    async def replacement():  # the fresh pool is ready only once the test says so
        entered.set()
        await starting.wait()
        return fresh

    collector = BatchCollector(lambda items: [i * 10 for i in items], 4, 0.0, Broken(), replacement=replacement)
    try:
        with pytest.raises(Unavailable, match="worker stopped"):
            await collector.submit([1])
        waiting = asyncio.ensure_future(collector.submit([2]))  # queued while the fresh pool starts
        await entered.wait()
        await asyncio.sleep(0)
        assert not waiting.done() and not Broken.shut
        starting.set()
        assert await waiting == [20] and Broken.shut and collector.executor is fresh
    finally:
        await collector.close()
        fresh.shutdown()


async def test_a_replacement_that_cannot_start_leaves_the_next_batch_unavailable_and_is_tried_again():
    from hetflow.core.errors import Unavailable

    class Broken(concurrent.futures.Executor):
        def submit(self, fn, /, *args, **kwargs):
            raise concurrent.futures.BrokenExecutor("a worker died")

    fresh, tries = concurrent.futures.ThreadPoolExecutor(1), []

    async def replacement():
        tries.append(len(tries))
        if len(tries) == 1:
            raise RuntimeError("the model did not load")
        return fresh

    collector = BatchCollector(lambda items: items, 4, 0.0, Broken(), replacement=replacement)
    try:
        for _ in range(2):
            with pytest.raises(Unavailable, match="worker stopped"):
                await collector.submit([1])
        assert await collector.submit([3]) == [3] and tries == [0, 1]
    finally:
        await collector.close()
        fresh.shutdown()


class ShutPool(concurrent.futures.ThreadPoolExecutor):
    def __init__(self):
        super().__init__(1)
        self.shut = asyncio.Event()

    def shutdown(self, wait=True, *, cancel_futures=False):
        self.shut.set()
        super().shutdown(wait, cancel_futures=cancel_futures)


@pytest.mark.parametrize("swap_once_started", [True, False])
async def test_a_swap_while_the_replacement_starts_lets_it_go_and_later_batches_run_on_the_swapped_one(
        swap_once_started):
    """A reload that lands while a fresh pool starts, or in the same turn as the break, wins: later batches
    do not wait for the fresh pool, which is shut down once it has started."""

    class Broken(concurrent.futures.Executor):
        def submit(self, fn, /, *args, **kwargs):
            raise concurrent.futures.BrokenExecutor("a worker died")

    fresh, reloaded, entered, starting = ShutPool(), ShutPool(), asyncio.Event(), asyncio.Event()

    async def replacement():  # ready only once the test says so
        entered.set()
        await starting.wait()
        return fresh

    collector = BatchCollector(lambda items: items, 4, 0.0, Broken(), replacement=replacement)
    try:
        if swap_once_started:
            with pytest.raises(Exception, match="worker stopped"):
                await collector.submit([1])
            await entered.wait()
        else:  # the break and the swap in one turn: the replacement has not run a step
            collector._replace_broken(collector.executor)
        collector.replace_executor(reloaded, None)
        assert await asyncio.wait_for(collector.submit([2]), 10) == [2] and collector.executor is reloaded
        starting.set()
        if swap_once_started:
            await asyncio.wait_for(fresh.shut.wait(), 10)
        assert fresh.shut.is_set() is swap_once_started and not reloaded.shut.is_set()
    finally:
        await collector.close()
        reloaded.shutdown()
        fresh.shutdown()


@pytest.mark.parametrize("turns_before_close", range(1, 7))
async def test_closing_at_any_step_of_a_batch_fails_its_caller_unavailable(turns_before_close):
    """Queued before the collector's first step, forming, launched but not started, running: the caller
    hears UNAVAILABLE, never waits for good."""
    from hetflow.core.errors import Unavailable

    release = threading.Event()
    pool = concurrent.futures.ThreadPoolExecutor(1)
    collector = BatchCollector(lambda items: (release.wait(10), items)[1], 4, 0.0, pool)
    caller = asyncio.ensure_future(collector.submit([1]))
    for _ in range(turns_before_close):
        await asyncio.sleep(0)
    await collector.close()
    release.set()
    with pytest.raises(Unavailable, match="stopping"):
        await asyncio.wait_for(caller, 10)
    pool.shutdown()


async def test_a_collector_closed_while_idle_answers_again_when_called(executor):
    collector = BatchCollector(double, 4, 0.0, executor)
    assert await collector.submit([1]) == [2]
    for _ in range(3):  # the collector takes its next run's slot and waits for a call
        await asyncio.sleep(0)
    await collector.close()
    try:
        assert await asyncio.wait_for(collector.submit([2]), 10) == [4]
    finally:
        await collector.close()


async def test_batches_run_at_once_up_to_the_concurrency_and_no_more():
    """Two workers: two batches run together (each waits for the other at a barrier); a third waits."""
    both_running = threading.Barrier(2, timeout=10)
    running, peak, lock = [0], [0], threading.Lock()

    def meet(items):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        try:
            if items[0] < 2:
                both_running.wait()  # one batch at a time would break the barrier after 10 s
            return items
        finally:
            with lock:
                running[0] -= 1

    pool = concurrent.futures.ThreadPoolExecutor(3)
    collector = BatchCollector(meet, 1, 0.0, pool, concurrency=2)
    try:
        assert await asyncio.gather(*(collector.submit([i]) for i in range(3))) == [[0], [1], [2]]
        assert peak[0] == 2
    finally:
        await collector.close()
        pool.shutdown()
