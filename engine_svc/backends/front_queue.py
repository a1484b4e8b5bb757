"""hetflow's aging priority queue in front of a vLLM engine (Chimera 3.7), shared by both vLLM backends.

Each call waits here with its prompt's token ids until the backend finds room for the head; the
caller reads its deltas from its own stream, which the backend's run fills. Closing the caller's
iterator early aborts the call, still waiting or already running. Aging counts the backend's
scheduling iterations (``iteration``): vLLM's engine steps.

vLLM cannot pin a finished request's blocks, so a program's KV retained for its next call (issue 35)
is kept here as vLLM's router keeps it: its context counts as used room in admission
(``retained_tokens``) until the program's next call here starts or the hold expires, so nothing is let
into vLLM that would evict it.
"""

from __future__ import annotations

import asyncio
import time
from typing import AsyncGenerator, Awaitable, Callable, Iterator

from prometheus_client import Histogram

from engine_svc.backends.admission import SharedPromptBlocks
from engine_svc.backends.base import GenerateCall, ModelServerGrant, OutputDelta, coalesce_ready
from hetflow.core.engine.aging_queue import AgingPriorityQueue
from hetflow.core.engine.request import EngineRequest, RequestStatus
from hetflow.core.errors import InvalidArgument
from hetflow.core.prefix import token_block_hashes

Held = tuple[EngineRequest, list[int], GenerateCall]
StreamItem = OutputDelta | ModelServerGrant
"""What a caller reads: deltas, or a held call's grant (``Engine.Hold``)."""
ENDED_BY_ITSELF = ("stop", "length")
"""Finish reasons of a call that ran to its end: its program's context may be held for its next call
(``FrontQueue.ended``); an aborted one's is not."""
QUEUED_S = Histogram("hetflow_engine_front_queue_seconds", "Call queued in hetflow's priority queue -> handed to "
                     "the model server", buckets=(0.001, 0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300))


class FrontQueue:
    def __init__(self, queue: AgingPriorityQueue) -> None:
        self.queue = queue
        self.iteration = 0
        """Scheduling iterations so far (Chimera 3.7's S and Q count these)."""
        self.wake = asyncio.Event()
        """Set when the head may have room: a call arrived, a call finished, the engine stepped."""
        self.waiting: dict[str, Held] = {}
        self._streams: dict[str, asyncio.Queue[StreamItem | BaseException]] = {}
        self.retained: dict[str, tuple[int, float]] = {}
        """Programs whose context is held for their next call -> (tokens, monotonic time it is let go)."""
        self.running_prompt_blocks = SharedPromptBlocks()
        """The started calls' prompt blocks, from ``admissible`` to ``ended``: admission counts a shared one once."""

    def check_new(self, request_id: str) -> None:
        if request_id in self._streams:
            raise InvalidArgument(f"request_id {request_id!r} is already running on this engine")

    async def serve(self, call: GenerateCall, token_ids: list[int], abort: Callable[[str], Awaitable[bool]],
                    block_size: int = 0) -> AsyncGenerator[StreamItem, None]:
        """Queue the call and stream its deltas; ``abort`` runs when the caller stops reading early.
        ``block_size``: the engine's KV block where it caches prefixes, its prompt's blocks hashed for
        admission to count the blocks it shares with others once (0: unknown or no prefix caching, every
        block counts)."""
        self.check_new(call.request_id)
        req = EngineRequest(request_id=call.request_id, prompt_tokens=len(token_ids),
                            max_tokens=call.sampling.max_tokens, priority=call.priority,
                            priority_tiebreak=call.priority_tiebreak, arrival_s=time.monotonic(),
                            program_id=call.program_id, reserve_output_tokens=call.reserve_output_tokens,
                            retain_kv_s=call.retain_kv_s,
                            block_hashes=token_block_hashes(token_ids, block_size) if block_size else ())
        stream: asyncio.Queue[StreamItem | BaseException] = asyncio.Queue()
        self._streams[call.request_id] = stream
        self.waiting[call.request_id] = (req, token_ids, call)
        self.queue.push(req, self.iteration)
        self.wake.set()
        finished = False
        try:
            while not finished:
                item = await stream.get()
                if isinstance(item, BaseException):
                    raise item
                if isinstance(item, OutputDelta):
                    item = coalesce_ready(item, stream)
                finished = item.finished
                yield item
        finally:
            if not finished:
                await abort(call.request_id)
            self._streams.pop(call.request_id, None)

    def admissible(self, has_room: Callable[[EngineRequest], bool]) -> Iterator[Held]:
        """Age the queue, then hand over heads, marked running, while ``has_room`` says the engine takes
        the next (it is asked again after the caller has started each one)."""
        self.queue.age(self.iteration)
        while (head := self.queue.peek()) is not None and has_room(head):
            self.queue.pop()
            req, token_ids, call = self.waiting.pop(head.request_id)
            req.status, req.first_scheduled_s = RequestStatus.RUNNING, time.monotonic()
            self.running_prompt_blocks.add(req)
            QUEUED_S.observe(req.first_scheduled_s - req.arrival_s)
            self.retained.pop(req.program_id, None)  # its context is the call's prefix now
            yield req, token_ids, call

    def ended(self, req: EngineRequest) -> None:
        """A started call left the engine: a finished one (``finished_s`` set) whose program is to be
        retained has its context held for ``retain_kv_s``, with a wake-up when the hold expires."""
        self.running_prompt_blocks.remove(req)
        if req.finished_s is None or req.retain_kv_s <= 0 or not req.program_id:
            return
        self.retained[req.program_id] = (req.prompt_tokens + req.output_tokens, time.monotonic() + req.retain_kv_s)
        asyncio.get_running_loop().call_later(req.retain_kv_s, self.wake.set)

    def retained_tokens(self, head_program_id: str = "") -> int:
        """The held contexts' tokens, but the head's own program's: its context is its call's prefix, which
        its prompt's blocks already count (the twin's ``BatchScheduler._reserved_for_others``); expired holds
        are let go."""
        now = time.monotonic()
        for program_id in [p for p, (_, until_s) in self.retained.items() if until_s <= now]:
            del self.retained[program_id]
        return sum(tokens for program_id, (tokens, _) in self.retained.items() if program_id != head_program_id)

    def abort_waiting(self, request_id: str) -> bool:
        """Take a call that has not started out of the queue and end its stream; False if it started."""
        held = self.waiting.pop(request_id, None)
        if held is None:
            return False
        self.queue.remove(request_id)
        self.finish(held[0], "abort")
        return True

    def put(self, request_id: str, item: StreamItem | BaseException) -> None:
        """A delta (or the error ending the call) for its caller, if the caller still reads."""
        stream = self._streams.get(request_id)
        if stream is not None:
            stream.put_nowait(item)

    def finish(self, req: EngineRequest, reason: str) -> None:
        self.put(req.request_id, OutputDelta(req.request_id, "", req.output_tokens, req.prompt_tokens, finished=True,
                                             finish_reason=reason))

    def pending_prefill_tokens(self) -> int:
        return sum(req.prompt_tokens for req in self.queue.requests())
