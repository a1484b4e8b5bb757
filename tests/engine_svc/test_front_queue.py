"""hetflow's queue in front of a vLLM engine, without one: heads start in priority order while there is
room, a caller who stops reading aborts its call, a waiting call's abort ends its stream."""

import asyncio

import pytest

from engine_svc.backends.base import GenerateCall, OutputDelta
from engine_svc.backends.front_queue import FrontQueue
from hetflow.core.call import SamplingSpec
from hetflow.core.engine.aging_queue import AgingPriorityQueue
from hetflow.core.errors import InvalidArgument


def call(request_id: str, priority: float) -> GenerateCall:
    return GenerateCall(request_id, "p", (), SamplingSpec(max_tokens=4), priority)


async def test_heads_start_in_priority_order_while_there_is_room_and_stream_to_their_callers():
    front, aborted = FrontQueue(AgingPriorityQueue()), []

    async def abort(request_id):
        aborted.append(request_id)
        return True

    streams = {name: front.serve(call(name, p), [1, 2, 3], abort) for name, p in (("late", 9.0), ("soon", 1.0))}
    reads = {name: asyncio.ensure_future(s.__anext__()) for name, s in streams.items()}
    await asyncio.sleep(0)
    started = [req.request_id for req, _, _ in front.admissible(lambda head: True)]
    assert started == ["soon", "late"] and not front.waiting
    for name in started:
        front.put(name, OutputDelta(name, "x", 1, 3, finished=True, finish_reason="stop"))
    assert [(await reads[n]).finished for n in started] == [True, True]
    assert aborted == []


async def test_no_room_leaves_the_head_waiting_and_its_abort_ends_the_stream():
    front = FrontQueue(AgingPriorityQueue())

    async def abort(request_id):
        return front.abort_waiting(request_id)

    stream = front.serve(call("a", 1.0), [1], abort)
    read = asyncio.ensure_future(stream.__anext__())
    await asyncio.sleep(0)
    assert list(front.admissible(lambda head: False)) == [] and "a" in front.waiting
    assert await abort("a") and (await read).finish_reason == "abort" and len(front.queue) == 0


async def test_a_caller_who_stops_reading_aborts_and_a_duplicate_id_is_refused():
    front, aborted = FrontQueue(AgingPriorityQueue()), []

    async def abort(request_id):
        aborted.append(request_id)
        return front.abort_waiting(request_id)

    stream = front.serve(call("a", 1.0), [1], abort)
    read = asyncio.ensure_future(stream.__anext__())
    await asyncio.sleep(0)
    with pytest.raises(InvalidArgument):
        front.check_new("a")
    front.put("a", OutputDelta("a", "x", 1, 1))
    await read
    await stream.aclose()
    assert aborted == ["a"] and not front.waiting
