"""The monitor's background jobs: a turn that fails does not end the ones after it."""

import asyncio

from monitor_svc.app import every


async def test_a_job_that_fails_once_runs_again():
    turns: list[int] = []

    def job() -> None:
        turns.append(len(turns))
        if len(turns) == 1:
            raise TypeError("got multiple values for argument 'event'")

    running = asyncio.ensure_future(every(0.001, job))
    for _ in range(2_000):   # ten seconds at most, on a loaded host
        if len(turns) >= 3 or running.done():
            break
        await asyncio.sleep(0.005)
    running.cancel()
    assert turns[:3] == [0, 1, 2]
