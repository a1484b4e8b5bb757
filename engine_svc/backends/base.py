"""The interface every engine backend implements, and the plain types it speaks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import AsyncIterator, Protocol

from engine_svc.model.profile import EngineProfile


@dataclass(frozen=True)
class SamplingSpec:
    max_tokens: int
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    ignore_eos: bool = False
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class GenerateCall:
    request_id: str
    prompt: str
    """Prompt text; chat calls carry ``messages`` and an empty prompt."""
    messages: tuple[tuple[str, str], ...]
    sampling: SamplingSpec
    priority: float
    program_id: str = ""


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


@dataclass
class BackendStatus:
    waiting: int
    running: int
    kv_cache_usage: float
    preemptions_total: int
    active_request_ids: list[str] = field(default_factory=list)


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

    async def close(self) -> None: ...
