"""The interface every engine backend implements, and the plain types it speaks."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Protocol, runtime_checkable

from hetflow.core.call import SamplingSpec
from hetflow.core.engine.profile import EngineProfile


@dataclass(frozen=True)
class GenerateCall:
    request_id: str
    prompt: str
    """Prompt text; chat calls carry ``messages`` and an empty prompt."""
    messages: tuple[tuple[str, str], ...]
    sampling: SamplingSpec
    priority: float
    program_id: str = ""
    priority_tiebreak: float = 0.0
    retain_kv_s: float = 0.0
    """Keep the program's KV this long after the call, for its next call (issue 35): the sim backend pins
    it; vLLM cannot, so the vLLM backends count it as used room when they admit (``FrontQueue.retained``)."""
    reserve_output_tokens: int = 0
    """Output tokens to keep KV room for while the call runs (issue 35): every backend's admission counts
    them (the engine model's, and ``admission.has_room`` before vLLM)."""
    prompt_token_ids: tuple[int, ...] = ()
    """The prompt as token ids when the caller tokenized it (a simulated engine then hashes its blocks
    for prefix caching); empty: the backend counts ``prompt`` itself."""
    output_token_ids: tuple[int, ...] = ()
    """A simulated engine's output, when the caller fixes it (its length is the output length, and its
    blocks join the prompt's in the prefix cache as they fill, so a next call that sends them back
    reuses them); empty: the backend draws a length."""


@dataclass
class OutputDelta:
    request_id: str
    text: str
    output_tokens: int
    prompt_tokens: int
    finished: bool = False
    finish_reason: str = ""
    queued_s: float = 0.0
    preemptions: int = 0


@dataclass(frozen=True)
class ModelServerGrant:
    """A held call's turn (``Engine.Hold``, issue 34): the caller streams it from the model server itself,
    with this body, and tells the engine how it ended (``release``)."""
    request_id: str
    url: str
    body_json: bytes
    prompt_tokens: int
    queued_s: float
    finished = False


def merge(first: OutputDelta, later: OutputDelta) -> OutputDelta:
    """One delta standing for two consecutive ones of the same request (fewer messages on the wire)."""
    return OutputDelta(first.request_id, first.text + later.text, later.output_tokens, later.prompt_tokens,
                       later.finished, later.finish_reason, first.queued_s + later.queued_s, later.preemptions)


def coalesce_ready(first: OutputDelta, ready: asyncio.Queue[Any]) -> OutputDelta:
    """Fold every delta already waiting in ``ready`` into ``first``; stops before anything that is not a delta."""
    delta = first
    while not delta.finished and not ready.empty():
        peeked = ready._queue[0]  # type: ignore[attr-defined]
        if not isinstance(peeked, OutputDelta):
            break
        delta = merge(delta, ready.get_nowait())
    return delta


@dataclass
class BackendStatus:
    waiting: int
    running: int
    kv_cache_usage: float
    preemptions_total: int
    active_request_ids: list[str] = field(default_factory=list)
    pending_prefill_tokens: int = 0
    """Prompt tokens of its requests not yet prefilled (what a KV-cost router weighs)."""
    server_starts: int = 0
    """Restarts of the model server behind the engine seen so far (its counters went back): its KV cache
    was emptied each time."""


class EngineBackend(Protocol):
    backend_name: str
    model: str
    profile: EngineProfile

    async def start(self) -> None: ...

    def generate(self, call: GenerateCall) -> AsyncIterator[OutputDelta]:
        """Stream deltas; closing the iterator early aborts the request."""
        ...

    async def abort(self, request_id: str) -> bool: ...

    def status(self) -> BackendStatus: ...

    @property
    def alive(self) -> bool:
        """The backend's engine can serve: False once it died (the engine then reports itself not
        serving, so that no balancer sends it calls only to fail them)."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class HoldingBackend(EngineBackend, Protocol):
    """A backend in front of a model server a caller may stream from itself (``Engine.Hold``)."""

    def hold(self, call: GenerateCall) -> AsyncIterator[ModelServerGrant | OutputDelta]:
        """The grant once the call's turn comes, then, after ``release``, its last delta; closing the
        iterator early aborts the call and frees its slot."""
        ...

    def release(self, request_id: str, output_tokens: int, finish_reason: str) -> bool:
        """The caller's stream ended: free the held slot; False when nothing is held under that id."""
        ...

    def holds(self, request_id: str) -> bool:
        """A call its caller holds, waiting for its turn or streaming it from the model server."""
        ...
