"""Releases of one event-loop turn reach the monitor as one message on its release stream, completed or
cancelled by their reason; a monitor without the stream gets ``Complete`` and ``Cancel`` call by call."""

import asyncio
from types import SimpleNamespace

import pytest

from hetflow.runtime.releases import MonitorReleases
from hetflow.v1 import monitor_pb2
from tests.factories import streamed


@pytest.mark.parametrize("has_stream", [True, False])
def test_releases_of_one_turn_go_together_each_completed_or_cancelled_by_its_reason(has_stream):
    asked: list[tuple[str, list[tuple[str, str]]]] = []

    async def release_batch(batch, timeout):
        asked.append(("ReleaseStream", [(r.request_id, r.reason) for r in batch.releases]))
        return monitor_pb2.ReleaseBatchReply(replies=[monitor_pb2.ReleaseReply(found=True) for _ in batch.releases])

    def unary(name):
        async def method(request, timeout):
            asked.append((name, [(request.request_id, request.reason)]))
            return monitor_pb2.ReleaseReply(found=True)
        return method

    monitor = SimpleNamespace(ReleaseStream=streamed(release_batch, monitor_pb2.ReleaseBatchReply, not has_stream),
                              Complete=unary("Complete"), Cancel=unary("Cancel"))

    async def scenario():
        releases = MonitorReleases(lambda: monitor, 1.0)
        await asyncio.gather(releases.release("a", 5, "completed", 0.0), releases.release("b", 0, "deadline", 0.0))
        await releases.close()

    asyncio.run(scenario())
    if has_stream:
        assert asked == [("ReleaseStream", [("a", "completed"), ("b", "deadline")])]
    else:
        assert sorted(asked) == [("Cancel", [("b", "deadline")]), ("Complete", [("a", "completed")])]


async def test_a_batch_reply_that_cannot_be_matched_is_a_failed_try_and_the_release_is_sent_again():
    from hetflow.runtime.coalescing import WrongAnswerCount

    sent = []

    async def ask(msg):
        sent.append(msg.request_id)
        if len(sent) == 1:
            raise WrongAnswerCount("a batch of 2 items got 1 answers")

    release = MonitorReleases(lambda: None, 1.0)
    release._batches.ask = ask
    await release.release("r1", 5, "completed", 0.0)
    assert sent == ["r1", "r1"]
