"""Client-side coalescing: the items callers ask for in one turn of the event loop go out as one batched RPC.

The router's ``Score``, the predictor's ``Predict`` and the monitor's ``Snapshots`` and ``AdmitBatch`` take
batches; a balancer deciding many calls at once asks each for one item per call. ``Coalescer`` gathers the
items asked before the loop's next turn and sends them together, so under load the balancer pays for one
RPC per turn instead of one per call, and a lone call waits for nothing (its batch leaves on the next turn).
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Generic, Sequence, TypeVar

import grpc
from prometheus_client import Histogram

COALESCED = Histogram("hetflow_coalesced_batch_items", "Items per coalesced RPC", ["rpc"],
                      buckets=(1, 2, 4, 8, 16, 32, 64))

ItemT = TypeVar("ItemT")
ResultT = TypeVar("ResultT")
Asked = tuple[ItemT, "asyncio.Future[ResultT]"]


class WrongAnswerCount(RuntimeError):
    """A service answered a batch with more or fewer answers than it was asked: its answers cannot be
    matched to their callers."""


def rejected(exc: BaseException) -> bool:
    """A service refused a batch's content (INVALID_ARGUMENT: one call's item, say), having applied none of
    it: its items may be asked again one by one."""
    return isinstance(exc, grpc.aio.AioRpcError) and exc.code() == grpc.StatusCode.INVALID_ARGUMENT


class Coalescer(Generic[ItemT, ResultT]):
    """``ask(item)`` resolves to ``send(items)[i]`` for the batch the item joined: at most ``max_items``
    per batch, in the order asked. ``send`` may answer an item with an exception instance, which that
    item's caller gets. When a batch of several fails with an error ``ask_alone`` accepts (``rejected``),
    its items are asked again one by one, so one item cannot fail another caller; other errors (the
    service away) reach every caller of the batch. A caller that gave up before its batch left is not
    sent; every caller's future is resolved whatever happens to the batch."""

    def __init__(self, send: Callable[[list[ItemT]], Awaitable[Sequence[ResultT | BaseException]]],
                 max_items: int, name: str, ask_alone: Callable[[BaseException], bool] = lambda exc: False) -> None:
        if max_items < 1:
            raise ValueError(f"max_items must be at least 1, got {max_items}")
        self._send, self._max_items, self._ask_alone = send, max_items, ask_alone
        self._observe = COALESCED.labels(name).observe
        self._asked: list[Asked[ItemT, ResultT]] = []
        self._sending: set[asyncio.Task[None]] = set()

    async def ask(self, item: ItemT) -> ResultT:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[ResultT] = loop.create_future()
        if not self._asked:
            loop.call_soon(self._flush)
        self._asked.append((item, answer))
        return await answer

    def _flush(self) -> None:
        asked, self._asked = [a for a in self._asked if not a[1].done()], []
        for start in range(0, len(asked), self._max_items):
            batch = asked[start:start + self._max_items]
            self._observe(len(batch))
            task = asyncio.get_running_loop().create_task(self._batch(batch))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _batch(self, batch: list[Asked[ItemT, ResultT]]) -> None:
        try:
            results = await self._send([item for item, _ in batch])
            if len(results) != len(batch):
                raise WrongAnswerCount(f"a batch of {len(batch)} items got {len(results)} answers")
        except asyncio.CancelledError:
            for _, answer in batch:
                answer.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 - every caller of the batch gets it
            if len(batch) > 1 and self._ask_alone(exc):
                await asyncio.gather(*(self._batch([one]) for one in batch))
            else:
                _resolve(batch, [exc] * len(batch))
            return
        _resolve(batch, results)


def _resolve(batch: list[Asked[ItemT, ResultT]], results: Sequence[ResultT | BaseException]) -> None:
    for (_, answer), result in zip(batch, results):
        if answer.done():
            continue
        if isinstance(result, BaseException):
            answer.set_exception(result)
        else:
            answer.set_result(result)
