"""The ``sim`` backend: the engine model (``hetflow.core.engine.scheduler.BatchScheduler``) run in real time.

Each iteration the batch scheduler picks a batch, the loop sleeps for the profile's iteration
time (times ``time_scale``: a slower GPU that a small host can keep up with), then applies the outcome
and streams one token per decoding request. Output lengths are ``max_tokens`` when ``ignore_eos`` is
set (trace replay), else drawn from a log-normal around ``output_median_tokens`` seeded by the request
id, so a replay is reproducible.

Time comes from an ``EngineClock``: the host's monotonic clock in service, a clock the test moves in
tests, so each iteration's intended end is checked without reading the wall clock. Every iteration
records how much longer than its intended length it took (``StepLag``): a host too slow for the profile
shows there rather than as a silently slower GPU.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import random
import time
from dataclasses import dataclass
from typing import AsyncIterator, Callable, Protocol

from engine_svc.backends.base import BackendStatus, GenerateCall, OutputDelta, coalesce_ready
from engine_svc.backends.sim_script import SimScript, answer_tokens, load_script
from engine_svc.config import EngineConfig
from hetflow.core.engine.aging_queue import AgingPriorityQueue
from hetflow.core.engine.profile import EngineProfile, load_profile
from hetflow.core.engine.request import EngineRequest
from hetflow.core.engine.scheduler import BatchScheduler, StepPlan
from hetflow.core.errors import InvalidArgument, ResourceExhausted
from hetflow.core.prefix import token_block_hashes
from hetflow.core.tokens import count_tokens, render_chat

_WORDS = ("the", "model", "returns", "a", "value", "for", "each", "step", "of", "plan", "code", "test",
          "answer", "is", "def", "solve", "(", ")", ":", "return", "x", "+", "y", "\n")
"""Filler for calls no script answers: no digit, so that a judge reading it never finds a rating in it
(``hetflow.core.cascade.judge_prompt.parse_grade``); it once held "1", and a cascade test failed whenever
an engine's request count put that word in the judge's two tokens."""
OUTPUT_SIGMA = 0.8  # log-normal spread of simulated output lengths
CATCH_UP_S = 0.05
"""How far behind its intended timeline the loop may run and still make the time up with the next
iterations' sleeps; beyond it the timeline restarts from now. Each iteration that took longer than its
intended length records the difference as its lag, whatever was made up after."""


class EngineClock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic clock."""
        ...

    async def sleep_until(self, when_s: float) -> None: ...


class MonotonicClock:
    """The host's monotonic clock (what the services run on)."""

    def now(self) -> float:
        return time.monotonic()

    async def sleep_until(self, when_s: float) -> None:
        await asyncio.sleep(max(0.0, when_s - time.monotonic()))


@dataclass(frozen=True)
class StepLag:
    """One iteration as run: its intended length, and how much longer it took from the loop starting it
    to its outcome (seconds of the clock, so scaled by ``time_scale``)."""

    duration_s: float
    late_s: float

    @property
    def late_share(self) -> float:
        """Lateness as a share of the iteration's intended length (0.05: 5% late)."""
        return self.late_s / self.duration_s if self.duration_s > 0 else 0.0


def simulated_output_tokens(request_id: str, median_tokens: int) -> int:
    rng = random.Random(int.from_bytes(hashlib.blake2b(request_id.encode(), digest_size=8).digest(), "big"))
    return max(1, int(round(math.exp(rng.gauss(math.log(median_tokens), OUTPUT_SIGMA)))))


class SimBackend:
    backend_name = "sim"

    def __init__(self, model: str, profile: EngineProfile, queue: AgingPriorityQueue,
                 output_median_tokens: int, clock: EngineClock | None = None, time_scale: float = 1.0,
                 on_step: Callable[[StepPlan, StepLag], None] = lambda plan, lag: None,
                 script: SimScript | None = None) -> None:
        """``time_scale``: each iteration takes the profile's time times this (2.0: a GPU half as fast);
        ``on_step``: called after every iteration with its batch and lag (metrics); ``script``: scripted
        answers (``sim_script``), filler for calls it does not match."""
        if time_scale <= 0:
            raise ValueError(f"time_scale must be > 0, got {time_scale}")
        self.model, self.profile = model, profile
        self.clock = clock or MonotonicClock()
        self.time_scale = time_scale
        self._on_step = on_step
        self._scheduler = BatchScheduler(profile, queue)
        self._output_median_tokens = output_median_tokens
        self._streams: dict[str, asyncio.Queue[OutputDelta]] = {}
        self._script = script
        self._answers: dict[str, list[str]] = {}
        """Scripted answers of the running calls, as the tokens they stream in."""
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run_forever())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def generate(self, call: GenerateCall) -> AsyncIterator[OutputDelta]:
        scripted = self._script.reply_for(list(call.messages), call.prompt) if self._script is not None else None
        answer = answer_tokens(scripted) if scripted is not None else None
        target = len(answer) if answer is not None else len(call.output_token_ids) or (
            call.sampling.max_tokens if call.sampling.ignore_eos
            else simulated_output_tokens(call.request_id, self._output_median_tokens))
        if call.prompt_token_ids:  # tokenized by the caller: its full blocks (output's too) can hit the cache
            prompt_tokens = len(call.prompt_token_ids)
            blocks = token_block_hashes(call.prompt_token_ids + call.output_token_ids, self.profile.block_size)
        else:
            prompt_tokens, blocks = count_tokens(call.prompt or render_chat(list(call.messages))), ()
        req = EngineRequest(request_id=call.request_id, prompt_tokens=prompt_tokens,
                            max_tokens=call.sampling.max_tokens, priority=call.priority,
                            priority_tiebreak=call.priority_tiebreak,
                            arrival_s=self.clock.now(), program_id=call.program_id,
                            target_output_tokens=target, block_hashes=blocks, retain_kv_s=call.retain_kv_s,
                            reserve_output_tokens=call.reserve_output_tokens)
        if call.request_id in self._streams:
            raise InvalidArgument(f"request_id {call.request_id!r} is already running on this engine")
        try:
            self._scheduler.add(req)
        except MemoryError as exc:
            raise ResourceExhausted(str(exc)) from exc
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from exc
        stream: asyncio.Queue[OutputDelta] = asyncio.Queue()
        self._streams[call.request_id] = stream
        if answer is not None:
            self._answers[call.request_id] = answer
        self._wake.set()
        finished = False
        try:
            while not finished:
                delta = coalesce_ready(await stream.get(), stream)
                finished = delta.finished
                yield delta
        finally:
            self._streams.pop(call.request_id, None)
            self._answers.pop(call.request_id, None)
            if not finished:
                self._scheduler.abort(call.request_id, self.clock.now())

    async def abort(self, request_id: str) -> bool:
        req = self._scheduler.abort(request_id, self.clock.now())
        stream = self._streams.get(request_id)
        if req is not None and stream is not None:
            stream.put_nowait(OutputDelta(request_id, "", req.output_tokens, req.prompt_tokens,
                                          finished=True, finish_reason="abort", preemptions=req.preemptions))
        return req is not None

    def status(self) -> BackendStatus:
        s = self._scheduler
        return BackendStatus(waiting=s.num_waiting, running=len(s.running), kv_cache_usage=s.kv.usage,
                             preemptions_total=s.preemptions_total, active_request_ids=list(s.requests),
                             pending_prefill_tokens=s.pending_prefill_tokens)

    @property
    def alive(self) -> bool:
        """The engine loop runs (False once it has died: a server then answers /health 503, as vLLM's
        does on EngineDeadError)."""
        return self._task is not None and not self._task.done()

    @property
    def scheduler(self) -> BatchScheduler:
        """The engine model's state, read-only for metrics (prefix-cache counters, KV pool)."""
        return self._scheduler

    async def _run_forever(self) -> None:
        clock = self.clock
        next_step_at = clock.now()
        while True:
            if not self._scheduler.has_work:
                self._wake.clear()
                await self._idle_until_woken()
                next_step_at = clock.now()
            started_s = clock.now()
            plan = self._scheduler.schedule(started_s)
            if plan.is_empty:
                await clock.sleep_until(clock.now() + 0.001)
                continue
            duration_s = plan.duration_s * self.time_scale
            next_step_at = max(next_step_at, clock.now() - CATCH_UP_S) + duration_s
            await clock.sleep_until(next_step_at)
            now = clock.now()
            for event in self._scheduler.update_from_step(plan, now):
                self._emit(event.request, event.finished)
            # Late: the iteration, from the loop starting it to its outcome, took longer than the profile says
            # (the loop's own work, and the last one's, included); an iteration that made time up is not late.
            self._on_step(plan, StepLag(duration_s, max(0.0, now - started_s - duration_s)))

    async def _idle_until_woken(self) -> None:
        """Wait for a request; with programs' KV retained, at most until the first of them expires (the next
        iteration lets it go, so the engine's reports stop counting it)."""
        retained = self._scheduler.retained_until_s
        if not retained:
            await self._wake.wait()
            return
        woken = asyncio.ensure_future(self._wake.wait())
        expired = asyncio.ensure_future(self.clock.sleep_until(min(retained.values())))
        try:
            await asyncio.wait((woken, expired), return_when=asyncio.FIRST_COMPLETED)
        finally:
            woken.cancel()
            expired.cancel()

    def _emit(self, req: EngineRequest, finished: bool) -> None:
        stream = self._streams.get(req.request_id)
        if stream is None:
            return
        answer = self._answers.get(req.request_id)
        text = answer[req.output_tokens - 1] if answer is not None else \
            " " + _WORDS[(req.seq + req.output_tokens) % len(_WORDS)]
        stream.put_nowait(OutputDelta(
            req.request_id, text,
            req.output_tokens, req.prompt_tokens, finished=finished, finish_reason=req.finish_reason,
            queued_s=_queued_delta_s(req, finished), preemptions=req.preemptions))


def _queued_delta_s(req: EngineRequest, finished: bool) -> float:
    """Queue time to report with this token, so that a stream's deltas sum to ``req.queued_s``: the
    first wait with the first token, the waits after preemptions with the last."""
    first_wait_s = (req.first_scheduled_s or req.arrival_s) - req.arrival_s
    return (first_wait_s if req.output_tokens == 1 else 0.0) + (req.queued_s - first_wait_s if finished else 0.0)


def sim_backend(cfg: EngineConfig, queue: AgingPriorityQueue) -> SimBackend:
    """The ``sim`` engine-backend plugin: the engine model on the configured profile."""
    profile = load_profile(cfg.profile)
    return SimBackend(cfg.model or profile.model, profile, queue, cfg.sim_output_median_tokens,
                      script=load_script(cfg.sim_script) if cfg.sim_script else None)
