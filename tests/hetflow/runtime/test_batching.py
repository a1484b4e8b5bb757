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
    collector = BatchCollector(lambda items: [i * 10 for i in items], 4, 0.0, Broken(), replacement=lambda: fresh)
    try:
        with pytest.raises(Unavailable, match="worker stopped"):
            await collector.submit([1])
        assert await collector.submit([2]) == [20] and Broken.shut and collector.executor is fresh
    finally:
        await collector.close()
        fresh.shutdown()
