"""Items asked in one loop turn share one batched call; a rejected batch is asked again item by item."""

import asyncio

import pytest

from hetflow.runtime.coalescing import Coalescer, WrongAnswerCount


class Rejected(Exception):
    pass


def recording(fail_on: object = None, error: type[Exception] = Rejected):
    batches: list[list[object]] = []

    async def send(items):
        batches.append(list(items))
        await asyncio.sleep(0)
        if fail_on in items:
            raise error(f"bad item {fail_on!r}")
        return [f"answer-{item}" for item in items]
    return batches, send


def test_items_asked_in_one_turn_go_in_one_batch_in_order_and_a_later_one_alone():
    async def scenario():
        batches, send = recording()
        coalescer = Coalescer(send, max_items=64, name="test")
        answers = await asyncio.gather(*(coalescer.ask(i) for i in range(5)))
        later = await coalescer.ask(9)
        return batches, answers, later

    batches, answers, later = asyncio.run(scenario())
    assert batches == [[0, 1, 2, 3, 4], [9]]
    assert answers == [f"answer-{i}" for i in range(5)] and later == "answer-9"


def test_batches_are_at_most_max_items():
    async def scenario():
        batches, send = recording()
        coalescer = Coalescer(send, max_items=2, name="test")
        answers = await asyncio.gather(*(coalescer.ask(i) for i in range(5)))
        return batches, answers

    batches, answers = asyncio.run(scenario())
    assert batches == [[0, 1], [2, 3], [4]] and answers == [f"answer-{i}" for i in range(5)]


def test_a_rejected_item_fails_only_its_own_caller():
    async def scenario():
        batches, send = recording(fail_on=2)
        coalescer = Coalescer(send, max_items=64, name="test", ask_alone=lambda exc: isinstance(exc, Rejected))
        return batches, await asyncio.gather(*(coalescer.ask(i) for i in range(4)), return_exceptions=True)

    batches, answers = asyncio.run(scenario())
    assert batches[0] == [0, 1, 2, 3] and sorted(map(tuple, batches[1:])) == [(0,), (1,), (2,), (3,)]
    assert [a for i, a in enumerate(answers) if i != 2] == ["answer-0", "answer-1", "answer-3"]
    assert isinstance(answers[2], Rejected)


def test_any_other_error_reaches_every_caller_of_the_batch_once():
    async def scenario():
        batches, send = recording(fail_on=1, error=ConnectionError)
        coalescer = Coalescer(send, max_items=64, name="test", ask_alone=lambda exc: isinstance(exc, Rejected))
        return batches, await asyncio.gather(*(coalescer.ask(i) for i in range(3)), return_exceptions=True)

    batches, answers = asyncio.run(scenario())
    assert batches == [[0, 1, 2]] and all(isinstance(a, ConnectionError) for a in answers)


def test_a_caller_that_gives_up_before_its_batch_leaves_is_not_sent_and_the_others_get_theirs():
    async def scenario():
        batches, send = recording()
        coalescer = Coalescer(send, max_items=64, name="test")
        impatient = asyncio.ensure_future(coalescer.ask("gone"))
        patient = asyncio.ensure_future(coalescer.ask("kept"))
        await asyncio.sleep(0)
        impatient.cancel()
        return batches, await patient, impatient

    batches, kept, impatient = asyncio.run(scenario())
    assert kept == "answer-kept" and impatient.cancelled() and batches == [["kept"]]  # the one gone not sent


def test_a_batch_cancelled_in_flight_cancels_its_callers():
    async def scenario():
        started = asyncio.Event()

        async def send(items):
            started.set()
            await asyncio.sleep(10)
        coalescer = Coalescer(send, max_items=64, name="test")
        callers = [asyncio.ensure_future(coalescer.ask(i)) for i in range(2)]
        await started.wait()
        for task in coalescer._sending:
            task.cancel()
        return await asyncio.gather(*callers, return_exceptions=True)

    assert all(isinstance(a, asyncio.CancelledError) for a in asyncio.run(scenario()))


def test_an_item_answered_with_an_exception_fails_only_its_caller():
    async def scenario():
        async def send(items):
            return [ValueError(item) if item == "bad" else item.upper() for item in items]
        coalescer = Coalescer(send, max_items=64, name="test")
        return await asyncio.gather(*(coalescer.ask(i) for i in ("a", "bad", "c")), return_exceptions=True)

    a, bad, c = asyncio.run(scenario())
    assert (a, c) == ("A", "C") and isinstance(bad, ValueError)


def test_a_batch_with_the_wrong_number_of_answers_fails_its_callers():
    async def scenario():
        async def short(items):
            return items[:-1]
        coalescer = Coalescer(short, max_items=64, name="test")
        return await asyncio.gather(coalescer.ask(1), coalescer.ask(2), return_exceptions=True)

    answers = asyncio.run(scenario())
    assert all(isinstance(a, WrongAnswerCount) and "2 items got 1" in str(a) for a in answers)


def test_max_items_must_be_positive():
    with pytest.raises(ValueError, match="max_items"):
        Coalescer(lambda items: items, max_items=0, name="test")
