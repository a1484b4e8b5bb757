"""``Balancer.DecideStream``: decisions on one long-lived stream, each answered as soon as it is decided.

A client deciding many calls pays for one gRPC call per decision on ``Decide``: about 0.3 ms of the
balancer's CPU on the development machine against 0.12 ms for a message and its answer on an open stream
(``hetflow.bench.grpc_floor``, docs/benchmarks.md). Here every message is one decision, decided
concurrently with the others, and answered by one reply carrying its tag and the status ``Decide`` would
have ended with (a refusal with its retry delay), so a held call never delays another's reply and a
failed decision fails only itself. A message with ``cancel`` stops its tag's decision; the stream's end
waits for the decisions under way, and the stream's cancellation cancels them. Each message says when it
was sent, so its wait before it was read counts in the balancer's standing-queue rule as a ``Decide``'s
wait does (``hetflow.runtime.accept_wait.StreamWaits``).
"""

from __future__ import annotations

import asyncio
import functools
import time
from typing import AsyncIterator, Awaitable, Callable

import grpc

from hetflow.runtime.accept_wait import StreamWaits
from hetflow.runtime.interceptors import status_of
from hetflow.runtime.logs import get_logger
from hetflow.runtime.message_checks import problem
from hetflow.v1 import balancer_pb2, common_pb2

log = get_logger(__name__)
Decide = Callable[[balancer_pb2.DecideRequest, float | None], Awaitable[balancer_pb2.DispatchDecision]]
"""Decides a request that waited the given seconds before it was read (None: not known)."""


def _failed(tag: int, code: grpc.StatusCode, details: str, retry_after_s: float | None = None
            ) -> balancer_pb2.DecideStreamReply:
    return balancer_pb2.DecideStreamReply(tag=tag, status=common_pb2.BatchStatus(code=code.value[0], details=details),
                                          retry_after_s=retry_after_s or 0.0)


async def _answer(message: balancer_pb2.DecideStreamRequest, decide: Decide,
                  accept_wait_s: float | None) -> balancer_pb2.DecideStreamReply:
    """The reply to one decision: its dispatch, or the status ``Decide`` would have ended with."""
    if not message.HasField("decide"):
        return _failed(message.tag, grpc.StatusCode.INVALID_ARGUMENT, "decide is required")
    try:
        async with asyncio.timeout(message.timeout_s if message.timeout_s > 0 else None):
            decision = await decide(message.decide, accept_wait_s)
    except TimeoutError:
        return _failed(message.tag, grpc.StatusCode.DEADLINE_EXCEEDED,
                       f"not decided within its {message.timeout_s:g}s")
    except Exception as exc:  # noqa: BLE001 - the decision's own status, as Decide's
        code, details = status_of(exc)
        if code == grpc.StatusCode.INTERNAL:
            log.exception("decision_failed")
        else:
            log.info("decision_rejected", code=code.name, reason=details)
        return _failed(message.tag, code, details, getattr(exc, "retry_after_s", None))
    return balancer_pb2.DecideStreamReply(tag=message.tag, decision=decision)


async def answer_decisions(requests: AsyncIterator[balancer_pb2.DecideStreamRequest],
                           decide: Decide) -> AsyncIterator[balancer_pb2.DecideStreamReply]:
    """Each request decided by ``decide``, concurrently; each reply yielded as its decision ends."""
    replies: asyncio.Queue[balancer_pb2.DecideStreamReply] = asyncio.Queue()
    deciding: dict[int, asyncio.Task[None]] = {}
    loop = asyncio.get_running_loop()
    waits = StreamWaits(time.monotonic())

    async def one(message: balancer_pb2.DecideStreamRequest, accept_wait_s: float | None) -> None:
        try:
            replies.put_nowait(await _answer(message, decide, accept_wait_s))
        except asyncio.CancelledError:  # its cancel message came, or the stream is going
            replies.put_nowait(_failed(message.tag, grpc.StatusCode.CANCELLED, "cancelled by its caller"))

    def ended(tag: int, task: asyncio.Task[None]) -> None:
        """The tag is free again; a decision cancelled before it began (its cancel in the same read) never
        ran ``one``, so it is answered here."""
        deciding.pop(tag, None)
        if task.cancelled():
            replies.put_nowait(_failed(tag, grpc.StatusCode.CANCELLED, "cancelled by its caller"))

    async def read() -> None:
        async for message in requests:
            if (found := problem(message)) is not None:  # a bad message (one that does not parse has no tag: 0)
                replies.put_nowait(_failed(getattr(message, "tag", 0), grpc.StatusCode.INVALID_ARGUMENT, found))
            elif message.cancel:
                if (task := deciding.get(message.tag)) is not None:
                    task.cancel()
            elif message.tag in deciding:
                replies.put_nowait(_failed(message.tag, grpc.StatusCode.INVALID_ARGUMENT,
                                           f"tag {message.tag} is already being decided"))
            else:
                wait_s = waits.wait_s(message.sent_after_s, time.monotonic())
                task = deciding[message.tag] = loop.create_task(one(message, wait_s))
                task.add_done_callback(functools.partial(ended, message.tag))
        await asyncio.gather(*deciding.values(), return_exceptions=True)

    reader = loop.create_task(read())
    try:
        while not (reader.done() and replies.empty()):
            getting = asyncio.ensure_future(replies.get())
            await asyncio.wait({getting, reader}, return_when=asyncio.FIRST_COMPLETED)
            if getting.done():
                yield getting.result()
            else:
                getting.cancel()
                reader.result()  # the request stream failed: its error ends this one
        reader.result()  # failed in the turn of the last reply: its error still ends this one
    finally:
        reader.cancel()
        for task in list(deciding.values()):
            task.cancel()
        await asyncio.gather(reader, *deciding.values(), return_exceptions=True)
