"""The Engine servicer's Hold on the direct path: a call refused before its grant has its monitor entry
ended before the refusal reaches its caller, who may decide the call again at once."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from engine_svc.backends.vllm_server import VllmServerBackend
from engine_svc.config import VllmServerConfig
from engine_svc.servicer import EngineServicer
from hetflow.core.engine.aging_queue import AgingPriorityQueue
from hetflow.core.errors import InvalidArgument, ResourceExhausted
from hetflow.v1 import common_pb2, engine_pb2


class RecordingMonitor:
    """The engine's monitor link, recording the direct-path entries it starts and ends."""

    def __init__(self) -> None:
        self.events: list[tuple[str, ...]] = []

    def started(self, request_id: str, admit) -> None:
        self.events.append(("started", request_id))

    async def ended(self, request_id: str, output_tokens: int, outcome: str, started_unix_s: float) -> None:
        self.events.append(("ended", request_id, outcome))


def servicer(hold) -> tuple[EngineServicer, RecordingMonitor]:
    backend = VllmServerBackend("m", VllmServerConfig(base_url="http://127.0.0.1:1"), AgingPriorityQueue(), "")
    backend.hold = hold
    direct = SimpleNamespace(check=lambda request, tenant, peer, now: SimpleNamespace(engine_releases=True))
    monitor = RecordingMonitor()
    return EngineServicer("e0", "127.0.0.1:1", backend, 64, direct, monitor), monitor


async def refusal(engine: EngineServicer, max_tokens: int, monitor: RecordingMonitor) -> tuple[Exception, list]:
    """The Hold's refusal, and the monitor's events when its caller sees it."""
    request = engine_pb2.EngineGenerateRequest(request_id="r1", prompt="hi",
                                               sampling=common_pb2.SamplingParams(max_tokens=max_tokens))

    async def messages():
        yield engine_pb2.HoldMessage(request=request)

    context = SimpleNamespace(auth_context=lambda: {})
    with pytest.raises(Exception) as refused:
        async for _ in engine.Hold(messages(), context):
            pass
    return refused.value, list(monitor.events)


async def test_a_hold_refused_before_its_grant_ends_its_entry_before_its_caller_hears():
    async def full(call):
        raise ResourceExhausted("engine e0 has 4096 calls waiting (max_waiting)")
        yield  # an async generator

    engine, monitor = servicer(full)
    error, seen = await refusal(engine, 8, monitor)
    assert isinstance(error, ResourceExhausted)
    assert seen == [("started", "r1"), ("ended", "r1", "engine-error:RESOURCE_EXHAUSTED")]


async def test_a_hold_whose_request_is_invalid_ends_its_entry_too():
    async def never(call):
        raise AssertionError("an invalid call reaches no backend")
        yield

    engine, monitor = servicer(never)
    error, seen = await refusal(engine, 65, monitor)  # over the engine's max_tokens_limit of 64
    assert isinstance(error, InvalidArgument)
    assert seen == [("started", "r1"), ("ended", "r1", "engine-error:INVALID_ARGUMENT")]


class SlowMonitor(RecordingMonitor):
    """A monitor whose releases take longer than a call's last chunk waits for one (``released_before_end``)."""

    def __init__(self) -> None:
        super().__init__()
        self.release_done = asyncio.Event()

    async def ended(self, request_id: str, output_tokens: int, outcome: str, started_unix_s: float) -> None:
        await self.release_done.wait()
        await super().ended(request_id, output_tokens, outcome, started_unix_s)


async def test_a_hold_whose_stream_failed_before_its_first_token_closes_only_once_its_entry_ended():
    """The caller streams from the model server, which fails before any token; the caller tells the
    engine and decides the call again, under the same id, once the hold closes: that must wait for the
    release, however slow, or the monitor refuses the new admit ("already in flight")."""
    from engine_svc.backends.base import ModelServerGrant, OutputDelta
    from hetflow.runtime.releases import RELEASE_BEFORE_END_S

    released: asyncio.Future = asyncio.get_running_loop().create_future()

    async def granted(call):
        yield ModelServerGrant(call.request_id, "http://127.0.0.1:1/v1/completions", b"{}", 3, 0.0)
        await released
        yield OutputDelta(call.request_id, "", 0, 3, True, "abort")

    engine, _ = servicer(granted)
    monitor = engine.monitor = SlowMonitor()
    engine.backend.release = lambda request_id, output_tokens, finish_reason: released.set_result(None)
    request = engine_pb2.EngineGenerateRequest(request_id="r1", prompt="hi",
                                               sampling=common_pb2.SamplingParams(max_tokens=8))
    end = engine_pb2.HoldEnd(error="UNAVAILABLE")   # no started_unix_s: no token came

    async def messages():
        yield engine_pb2.HoldMessage(request=request)
        yield engine_pb2.HoldMessage(end=end)

    async def hold() -> None:
        async for _ in engine.Hold(messages(), SimpleNamespace(auth_context=lambda: {})):
            pass

    closed = asyncio.create_task(hold())
    await asyncio.sleep(RELEASE_BEFORE_END_S + 0.3)   # past what a finished call's last chunk waits
    assert not closed.done()
    monitor.release_done.set()
    await closed
    assert monitor.events[-1] == ("ended", "r1", "engine-error:UNAVAILABLE")


async def test_an_engine_whose_model_server_stopped_answering_reports_itself_not_serving(monkeypatch):
    """Three metrics reads in a row that the server does not answer: the engine reports not serving (every
    call would fail there); at the first read it answers again, serving."""
    from hetflow.runtime.http1 import HttpConnectError

    engine, _ = servicer(hold=None)
    backend = engine.backend
    answers = [False, False, False, True]
    serving = []   # what the engine reports after each read

    async def read_metrics() -> None:
        if not answers.pop(0):
            raise HttpConnectError("connection refused")

    async def until_next_read() -> None:   # before each read: after the one before it
        if len(answers) < 4:
            serving.append(engine.status_proto().serving)
        if not answers:
            raise asyncio.CancelledError

    monkeypatch.setattr(backend, "_read_metrics", read_metrics)
    monkeypatch.setattr(backend, "_until_next_read", until_next_read)
    with pytest.raises(asyncio.CancelledError):
        await backend._watch_metrics()
    assert serving == [True, True, False, True]


def test_an_in_process_vllm_whose_engine_died_is_not_alive():
    from engine_svc.backends.vllm_backend import VllmBackend
    from engine_svc.config import VllmConfig

    backend = VllmBackend("m", VllmConfig(), AgingPriorityQueue(), "")
    assert not backend.alive   # not started
    backend._llm = SimpleNamespace(errored=False)
    assert backend.alive
    backend._llm = SimpleNamespace(errored=True)   # vLLM's AsyncLLM once its engine core died
    assert not backend.alive


def test_each_engine_process_reports_an_incarnation_of_its_own():
    first, _ = servicer(hold=None)
    again, _ = servicer(hold=None)   # the same engine id, started again
    assert first.status_proto().incarnation.endswith(".0")
    assert first.status_proto().incarnation == first.status_proto().incarnation != again.status_proto().incarnation


async def test_a_call_whose_abort_fails_as_its_caller_leaves_still_ends_its_entry():
    """The caller leaves mid-stream and the abort raises (vLLM's engine core died): the monitor still hears
    the call ended, or its entry would stand, and be told again at every monitor restart."""
    from engine_svc.backends.base import OutputDelta

    async def dying(call):
        try:
            yield OutputDelta(call.request_id, "a", 1, 3)
            await asyncio.Event().wait()
        finally:
            raise RuntimeError("engine core died")

    engine, monitor = servicer(hold=None)
    engine.backend.generate = dying
    request = engine_pb2.EngineGenerateRequest(request_id="r1", prompt="hi",
                                               sampling=common_pb2.SamplingParams(max_tokens=8))
    stream = engine.Generate(request, SimpleNamespace(auth_context=lambda: {}))
    assert (await anext(stream)).text == "a"
    with pytest.raises(RuntimeError, match="engine core died"):
        await stream.aclose()   # the caller went away
    await engine.releases_sent()
    assert monitor.events == [("started", "r1"), ("ended", "r1", "cancelled")]


async def test_aborting_a_held_call_is_refused_as_its_callers_to_cancel():
    """The engine cannot stop a stream its caller takes from the model server, and freeing the slot would
    over-fill the server: Abort names the caller's way instead."""
    from hetflow.core.errors import FailedPrecondition

    engine, _ = servicer(hold=VllmServerBackend.hold)
    engine.backend._held["r1"] = asyncio.get_running_loop().create_future()   # a caller holds r1
    with pytest.raises(FailedPrecondition, match="closing its hold"):
        await engine.Abort(engine_pb2.AbortRequest(request_id="r1"), SimpleNamespace())
    assert not (await engine.Abort(engine_pb2.AbortRequest(request_id="r2"), SimpleNamespace())).found
