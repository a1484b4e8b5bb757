"""hetflow's queue in front of a vLLM engine, without one: heads start in priority order while there is
room, a caller who stops reading aborts its call, a waiting call's abort ends its stream."""

import asyncio

import pytest

from engine_svc.backends.base import GenerateCall, OutputDelta
from engine_svc.backends.front_queue import FrontQueue
from hetflow.core.call import SamplingSpec
from hetflow.core.engine.aging_queue import AgingPriorityQueue
from hetflow.core.errors import InvalidArgument
from hetflow.core.prefix import token_block_hashes


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


async def test_a_finished_program_s_context_is_held_as_used_room_until_its_next_call_starts():
    """vLLM cannot pin blocks: a retained context (issue 35) counts in admission instead, as vLLM's router
    counts an acting program's tokens, until the program's next call starts here."""
    front = FrontQueue(AgingPriorityQueue())

    async def abort(request_id):
        return True

    first = GenerateCall("p/1", "p", (), SamplingSpec(max_tokens=4), 0.0, program_id="p", retain_kv_s=60.0)
    stream = front.serve(first, [1, 2, 3], abort)
    read = asyncio.ensure_future(stream.__anext__())
    await asyncio.sleep(0)
    [(req, _, _)] = front.admissible(lambda head: True)
    req.output_tokens = 4
    front.ended(req)                                   # not finished (aborted, failed): nothing held
    assert front.retained_tokens() == 0
    req.finished_s = 1.0
    front.ended(req)
    assert front.retained_tokens() == 3 + 4
    front.put("p/1", OutputDelta("p/1", "x", 4, 3, finished=True, finish_reason="stop"))
    await read
    second = front.serve(GenerateCall("p/2", "p", (), SamplingSpec(max_tokens=4), 0.0, program_id="p"),
                         [1, 2, 3, 4], abort)
    read = asyncio.ensure_future(second.__anext__())
    await asyncio.sleep(0)
    assert [r.request_id for r, _, _ in front.admissible(lambda head: True)] == ["p/2"]
    assert front.retained_tokens() == 0                # the next call took its context over
    read.cancel()


async def test_a_program_s_next_call_is_not_charged_its_own_held_context_only_the_others():
    """The head's own held context is its prompt's cached prefix, which its prompt's blocks count already:
    charged it again, a resumed call needed room for its context twice (the twin's ``BatchScheduler``
    reserves other programs' contexts only)."""
    front = FrontQueue(AgingPriorityQueue())
    for program_id, token_ids in (("p", [1, 2, 3]), ("q", [1, 2, 3, 4, 5])):
        stream = front.serve(GenerateCall(f"{program_id}/1", "m", (), SamplingSpec(max_tokens=4), 0.0,
                                          program_id=program_id, retain_kv_s=60.0),
                             token_ids, lambda request_id: asyncio.sleep(0))
        read = asyncio.ensure_future(stream.__anext__())
        await asyncio.sleep(0)
        [(req, _, _)] = front.admissible(lambda head: True)
        req.output_tokens, req.finished_s = 4, 1.0
        front.ended(req)
        read.cancel()
    assert front.retained_tokens() == (3 + 4) + (5 + 4)
    assert front.retained_tokens("p") == 5 + 4         # p's next call is charged q's context alone
    assert front.retained_tokens("q") == 3 + 4
    assert front.retained_tokens("r") == (3 + 4) + (5 + 4)


async def test_a_held_context_is_let_go_when_its_hold_expires():
    front = FrontQueue(AgingPriorityQueue())
    stream = front.serve(GenerateCall("q/1", "p", (), SamplingSpec(max_tokens=4), 0.0, program_id="q",
                                      retain_kv_s=0.01), [1, 2], lambda request_id: asyncio.sleep(0))
    read = asyncio.ensure_future(stream.__anext__())
    await asyncio.sleep(0)
    [(req, _, _)] = front.admissible(lambda head: True)
    req.finished_s = 1.0
    front.ended(req)
    front.wake.clear()
    await asyncio.wait_for(front.wake.wait(), timeout=60)  # woken when the hold expires
    assert front.retained_tokens() == 0
    read.cancel()


async def test_a_started_call_s_prompt_blocks_count_for_admission_until_it_ends():
    front = FrontQueue(AgingPriorityQueue())

    async def abort(request_id):
        return front.abort_waiting(request_id)

    tokens = list(range(40))
    reads = [asyncio.ensure_future(front.serve(call(name, 1.0), tokens, abort, size).__anext__())
             for name, size in (("known", 16), ("unknown", 0))]
    await asyncio.sleep(0)
    admitted = [req for req, _, _ in front.admissible(lambda head: True)]
    hashes = {req.request_id: req.block_hashes for req in admitted}
    assert hashes == {"known": token_block_hashes(tokens, 16), "unknown": ()}   # two full blocks of 16
    assert len(hashes["known"]) == 2 and front.running_prompt_blocks.held_prefix(admitted[0]) == 2
    for req in admitted:
        front.ended(req)                                # the started calls' blocks leave with them
    assert front.running_prompt_blocks.held_prefix(admitted[0]) == 0
    for read in reads:
        read.cancel()
