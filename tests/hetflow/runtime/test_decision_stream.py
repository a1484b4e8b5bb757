"""A decision stream's second message waits for the balancer's headers, a bounded while."""

import asyncio

from hetflow.runtime import decision_stream


class Call:
    def __init__(self) -> None:
        self.written: list[str] = []
        self.headers = asyncio.Event()

    async def write(self, message: str) -> None:
        self.written.append(message)

    async def initial_metadata(self) -> tuple:
        await self.headers.wait()
        return ()


async def test_the_second_message_leaves_once_the_headers_come():
    call, outbox = Call(), asyncio.Queue()
    for message in ("first", "second"):
        outbox.put_nowait(message)
    writer = asyncio.ensure_future(decision_stream._write(call, outbox))
    for _ in range(5):
        await asyncio.sleep(0)
    assert call.written == ["first"]
    call.headers.set()
    for _ in range(5):
        await asyncio.sleep(0)
    assert call.written == ["first", "second"]
    writer.cancel()


async def test_a_balancer_that_sends_no_headers_yet_is_written_to_after_the_wait(monkeypatch):
    monkeypatch.setattr(decision_stream, "HEADERS_WAIT_S", 0.05)
    call, outbox = Call(), asyncio.Queue()
    for message in ("first", "second"):
        outbox.put_nowait(message)
    writer = asyncio.ensure_future(decision_stream._write(call, outbox))
    await asyncio.sleep(0.3)
    assert call.written == ["first", "second"]
    writer.cancel()
