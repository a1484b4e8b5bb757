"""The ``vllm-server`` backend: an engine that is an existing ``vllm serve``, reached over its HTTP API.

hetflow's aging priority queue (Chimera 3.7) stays in front: a request goes to the server only when the
server has room (``admission.has_room``: hetflow's requests in it below ``max_num_seqs``, KV from the
server's own ``/metrics``), so the order work starts in is hetflow's. Aging counts the server's engine
steps (its ``vllm:iteration_tokens_total`` observations), the same scheduling iterations the
in-process backend counts. Prompts are tokenised by the server's
``/tokenize`` (its chat template, its tokenizer), and the token ids are what ``/v1/completions`` gets, so
the KV hetflow accounts is the KV vLLM allocates. hetflow's order travels as vLLM's request ``priority``
(``vllm_priority``). Cancelling a request closes its HTTP stream, on which vLLM aborts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from dataclasses import replace
from typing import Any, AsyncGenerator, AsyncIterator, Mapping

from engine_svc.backends import vllm_metrics
from engine_svc.backends.admission import check_admissible, has_room
from engine_svc.backends.base import BackendStatus, GenerateCall, ModelServerGrant, OutputDelta
from engine_svc.backends.front_queue import ENDED_BY_ITSELF, FrontQueue
from engine_svc.backends.vllm_backend import vllm_priority
from engine_svc.config import EngineConfig, VllmServerConfig
from hetflow.core.call import OPTIONAL_SAMPLING_FIELDS
from hetflow.core.engine.aging_queue import AgingPriorityQueue
from hetflow.core.engine.kv_cache import blocks_for
from hetflow.core.engine.profile import EngineProfile, load_profile
from hetflow.core.engine.request import EngineRequest
from hetflow.core.errors import InvalidArgument, Unavailable
from hetflow.runtime.http1 import Http1Client, HttpError, HttpTimeout, HttpTransportError
from hetflow.runtime.logs import get_logger
from hetflow.runtime.vllm_stream import CompletionEvent, server_error, stream_completion

log = get_logger(__name__)
SILENT_READS_DEAD = 3
"""Metrics reads in a row a server does not answer before its engine reports itself not serving (one
missed read is a blip; it serves again at the first read it answers)."""


class VllmServerBackend:
    backend_name = "vllm-server"

    def __init__(self, model: str, cfg: VllmServerConfig, queue: AgingPriorityQueue,
                 profile_spec: str | Mapping[str, Any]) -> None:
        if not cfg.base_url:
            raise ValueError("vllm_server.base_url is required for backend vllm-server (e.g. http://127.0.0.1:8001)")
        self.cfg, self.front, self.model = cfg, FrontQueue(queue), model
        self._profile_spec = profile_spec
        self.profile: EngineProfile | None = None
        self._base_url = cfg.base_url.rstrip("/")
        connections = cfg.max_num_seqs + cfg.server_backlog + 8  # its streams, and its reads and tokenisations
        self._http = Http1Client(read_timeout_s=cfg.request_timeout_s, connect_timeout_s=10.0,
                                 max_idle_per_origin=connections, max_connections_per_origin=connections)
        self._served_model = cfg.served_model
        self._max_model_len = 0
        self._load = vllm_metrics.VllmServerLoad()
        self._freed_blocks_since_read = 0
        """KV blocks of hetflow's requests that finished since the server's last report."""
        self._failed_reads = 0
        """Metrics reads in a row the server did not answer."""
        self._server_starts = 0
        """Restarts of the server seen (``BackendStatus.server_starts``)."""
        self._tokenizing: set[str] = set()
        """Calls whose prompts the server is tokenizing: reported as active, as the monitor reconciles its
        entries against the report (one missing from it is ended)."""
        self._running: dict[str, tuple[EngineRequest, asyncio.Task[None]]] = {}
        self._held: dict[str, asyncio.Future[tuple[int, str]]] = {}
        """Held calls (``Engine.Hold``) -> their end, (output tokens, finish reason), once released."""
        self._loops: list[asyncio.Task[None]] = []
        self._arrived = asyncio.Event()
        """Set when a call comes: an idle engine reads the server's load then, not at its idle interval."""

    # -- lifecycle -----------------------------------------------------------------------
    async def start(self) -> None:
        models = await self._until_answering()
        served = {m["id"]: m for m in models}
        if not self._served_model:
            self._served_model = models[0]["id"]
        elif self._served_model not in served:
            raise ValueError(f"vllm_server.served_model {self._served_model!r} is not served by {self.cfg.base_url}; "
                             f"it serves {sorted(served)}")
        self._max_model_len = int(served[self._served_model].get("max_model_len") or 0)
        self.model = self.model or self._served_model
        await self._read_metrics()
        load = self._load
        if not load.num_gpu_blocks:
            raise Unavailable(f"{self.cfg.base_url}/metrics has no vllm:cache_config_info (is it a vLLM v1 server "
                              "with metrics on?)")
        base = load_profile(self._profile_spec)
        self.profile = replace(base, model=self.model, kv_capacity_tokens=load.num_gpu_blocks * load.block_size,
                               block_size=load.block_size, max_num_seqs=self.cfg.max_num_seqs,
                               max_model_len=self._max_model_len or base.max_model_len)
        loop = asyncio.get_running_loop()
        self._loops = [loop.create_task(self._watch_metrics()), loop.create_task(self._admit_forever())]
        log.info("vllm_server_attached", base_url=self.cfg.base_url, model=self._served_model,
                 kv_blocks=load.num_gpu_blocks, block_size=load.block_size, max_model_len=self._max_model_len)

    async def _until_answering(self) -> list[dict[str, Any]]:
        deadline = time.monotonic() + self.cfg.startup_timeout_s
        while True:
            try:
                reply = await self._http.get(f"{self._base_url}/v1/models", timeout_s=5.0)
                reply.raise_for_status()
                return list(reply.json()["data"])
            except (HttpError, KeyError, ValueError) as exc:
                if time.monotonic() > deadline:
                    raise Unavailable(f"vLLM server {self.cfg.base_url} did not answer /v1/models within "
                                      f"{self.cfg.startup_timeout_s:.0f}s: {exc}") from exc
                await asyncio.sleep(1.0)

    async def close(self) -> None:
        for task in self._loops:
            task.cancel()
        for request_id in list(self.front.waiting) + list(self._running):
            await self.abort(request_id)
        await asyncio.gather(*self._loops, *(t for _, t in self._running.values()), return_exceptions=True)
        await self._http.aclose()

    # -- requests ------------------------------------------------------------------------
    async def generate(self, call: GenerateCall) -> AsyncIterator[OutputDelta]:
        async with contextlib.aclosing(self._serve(call)) as items:  # a caller gone aborts the call now
            async for item in items:
                assert isinstance(item, OutputDelta)
                yield item

    async def hold(self, call: GenerateCall) -> AsyncIterator[ModelServerGrant | OutputDelta]:
        """``Engine.Hold``: the call waits in hetflow's queue as any other; its turn is a grant of the exact
        request this backend would send (token ids, priority), and it keeps its slot until ``release``."""
        self.front.check_new(call.request_id)
        self._held[call.request_id] = asyncio.get_running_loop().create_future()
        try:
            async with contextlib.aclosing(self._serve(call)) as items:  # aborted before its hold is forgotten
                async for item in items:
                    yield item
        finally:
            self._held.pop(call.request_id, None)

    def holds(self, request_id: str) -> bool:
        return request_id in self._held

    def release(self, request_id: str, output_tokens: int, finish_reason: str) -> bool:
        end = self._held.get(request_id)
        if end is None or end.done():
            return False
        end.set_result((output_tokens, finish_reason))
        return True

    async def _serve(self, call: GenerateCall) -> AsyncGenerator[ModelServerGrant | OutputDelta, None]:
        self.front.check_new(call.request_id)
        self._arrived.set()
        self._tokenizing.add(call.request_id)
        try:
            token_ids = await self._tokenize(call)
        finally:
            self._tokenizing.discard(call.request_id)
        self._check_fits(len(token_ids), call.sampling.max_tokens)
        stream = self.front.serve(call, token_ids, self.abort,
                                  self._load.block_size if self._load.prefix_caching else 0)
        try:
            async for item in stream:
                yield item
        finally:
            await stream.aclose()  # runs the abort when the caller stopped reading early

    async def abort(self, request_id: str) -> bool:
        if self.front.abort_waiting(request_id):
            return True
        running = self._running.get(request_id)
        if running is None:
            return False
        running[1].cancel()  # closes the HTTP stream; vLLM aborts a request whose client went away
        return True

    @property
    def alive(self) -> bool:
        """The server answered one of its last ``SILENT_READS_DEAD`` metrics reads."""
        return self._failed_reads < SILENT_READS_DEAD

    def status(self) -> BackendStatus:
        return BackendStatus(waiting=len(self.front.queue) + self._load.waiting, running=len(self._running),
                             kv_cache_usage=self._load.kv_cache_usage, preemptions_total=self._load.preemptions_total,
                             active_request_ids=[*self._tokenizing, *self.front.waiting, *self._running],
                             pending_prefill_tokens=self.front.pending_prefill_tokens(),
                             server_starts=self._server_starts)

    # -- the server's load, and admission --------------------------------------------------
    async def _read_metrics(self) -> None:
        reply = await self._http.get(f"{self._base_url}/metrics", timeout_s=5.0)
        reply.raise_for_status()
        load = vllm_metrics.parse(reply.content.decode())
        if self._load.num_gpu_blocks and not load.num_gpu_blocks:  # admission needs the KV's size
            raise ValueError(f"{self.cfg.base_url}/metrics has no vllm:cache_config_info this time")
        if load.engine_steps < self._load.engine_steps:   # its counters went back: the server restarted
            self._server_starts += 1
        steps = max(0, load.engine_steps - self._load.engine_steps) if self._load.engine_steps else 0
        self._load, self._freed_blocks_since_read = load, 0
        for _ in range(min(steps, 10_000)):  # each engine step is one scheduling iteration (Chimera 3.7)
            self.front.iteration += 1
            for req, _task in self._running.values():
                self.front.queue.note_running_iteration(req)

    async def _watch_metrics(self) -> None:
        while True:
            await self._until_next_read()
            try:
                await self._read_metrics()
                self._failed_reads = 0
            except HttpError as exc:
                self._failed_reads += 1
                log.warning("vllm_server_metrics_failed", base_url=self.cfg.base_url, error=str(exc),
                            failed_reads=self._failed_reads)
            except ValueError as exc:   # it answered, with metrics not as vLLM's this time
                log.warning("vllm_server_metrics_failed", base_url=self.cfg.base_url, error=str(exc))
            if len(self.front.queue):
                self.front.wake.set()

    async def _until_next_read(self) -> None:
        """``metrics_interval_s`` while hetflow has requests in the server or waiting for it; otherwise until
        a call comes or ``metrics_idle_interval_s`` has passed."""
        if self._running or len(self.front.queue):
            await asyncio.sleep(self.cfg.metrics_interval_s)
            return
        self._arrived.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.cfg.metrics_idle_interval_s):
                await self._arrived.wait()

    def _has_room(self, req: EngineRequest) -> bool:
        """hetflow keeps at most ``max_num_seqs`` (plus ``server_backlog``) of its requests in the server;
        the server's KV report lags by up to ``metrics_interval_s``, so blocks hetflow's own requests
        released since the last report are taken off it (else each finish would wait for the next read to
        admit the next)."""
        load = self._load
        freed = self._freed_blocks_since_read / max(1, load.num_gpu_blocks)
        return has_room(req, (r for r, _ in self._running.values()), self.cfg.max_num_seqs + self.cfg.server_backlog,
                        max(0.0, load.kv_cache_usage - freed), load.num_gpu_blocks, load.block_size,
                        self.front.retained_tokens(req.program_id), self.front.running_prompt_blocks)

    async def _admit_forever(self) -> None:
        while True:
            await self.front.wake.wait()
            self.front.wake.clear()
            for req, token_ids, call in self.front.admissible(self._has_room):
                self._start(req, token_ids, call)

    def _start(self, req: EngineRequest, token_ids: list[int], call: GenerateCall) -> None:
        """The admitted call's request to the server, in a task of its own (``abort`` cancels it)."""
        task = asyncio.get_running_loop().create_task(self._run(req, token_ids, call))
        self._running[req.request_id] = (req, task)
        task.add_done_callback(functools.partial(self._cancelled_unstarted, req))

    def _cancelled_unstarted(self, req: EngineRequest, task: asyncio.Task[None]) -> None:
        """A call aborted before its task's first step never ran ``_run`` (a coroutine cancelled before it
        starts runs none of its handlers): its caller's end and its slot's release are done here."""
        if task.cancelled() and self._running.get(req.request_id, (None, None))[1] is task:
            self.front.finish(req, "abort")
            self._left(req)

    def _payload(self, req: EngineRequest, token_ids: list[int], call: GenerateCall) -> dict[str, Any]:
        s = call.sampling
        payload: dict[str, Any] = {
            "model": self._served_model, "prompt": token_ids, "max_tokens": s.max_tokens, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            "ignore_eos": s.ignore_eos, "stop": list(s.stop)}
        for name in OPTIONAL_SAMPLING_FIELDS:
            if getattr(s, name) is not None:
                payload[name] = getattr(s, name)
        if self.cfg.pass_priority:
            payload["priority"] = vllm_priority(req)
        return payload

    async def _run(self, req: EngineRequest, token_ids: list[int], call: GenerateCall) -> None:
        try:
            held = self._held.get(req.request_id)
            if held is not None:
                await self._grant(req, token_ids, call, held)
            else:
                await self._stream_retrying(req, token_ids, call)
        except asyncio.CancelledError:
            self.front.finish(req, "abort")
        except (InvalidArgument, Unavailable) as exc:
            self.front.put(req.request_id, exc)
        except Exception as exc:  # noqa: BLE001 - the server's failure (an HTTP error, a reply not as vLLM's,
            # whatever it breaks here) is the caller's UNAVAILABLE, never a stream left waiting
            log.warning("vllm_server_request_failed", request_id=req.request_id, error=str(exc))
            self.front.put(req.request_id,
                           Unavailable(f"vLLM server failed the request: {type(exc).__name__}: {exc}"))
        finally:
            self._left(req)

    def _left(self, req: EngineRequest) -> None:
        """The call's request left the server: its slot and blocks free for the next admission."""
        self._running.pop(req.request_id, None)
        self._freed_blocks_since_read += blocks_for(req.prompt_tokens + req.output_tokens, self._load.block_size)
        self.front.ended(req)
        self.front.wake.set()

    async def _stream_retrying(self, req: EngineRequest, token_ids: list[int], call: GenerateCall) -> None:
        """The request's stream, sent again (``connection_retries``) when its connection fails before
        any token came."""
        for attempt in range(self.cfg.connection_retries + 1):
            try:
                return await self._stream(req, token_ids, call)
            except HttpTransportError as exc:
                timed_out = isinstance(exc, HttpTimeout)
                if timed_out or req.output_tokens or attempt == self.cfg.connection_retries:
                    raise
                log.info("vllm_server_request_retried", request_id=req.request_id, error=type(exc).__name__)

    async def _stream(self, req: EngineRequest, token_ids: list[int], call: GenerateCall) -> None:
        queued_s = (req.first_scheduled_s or req.arrival_s) - req.arrival_s
        async for events in stream_completion(self._http, f"{self._base_url}/v1/completions",
                                              self._payload(req, token_ids, call),
                                              req.request_id, req.prompt_tokens):
            delta = self._delta(req, events, queued_s)  # what arrived together goes on as one delta
            queued_s = 0.0
            self.front.put(req.request_id, delta)
            if delta.finished:
                if delta.finish_reason in ENDED_BY_ITSELF:   # an aborted call's program keeps no room
                    req.finished_s = time.monotonic()
                return
        self.front.finish(req, "abort")  # ended without a finish reason

    @staticmethod
    def _delta(req: EngineRequest, events: list[CompletionEvent], queued_s: float) -> OutputDelta:
        last = events[-1]
        req.output_tokens = last.output_tokens
        return OutputDelta(req.request_id, "".join(e.text for e in events), last.output_tokens, last.prompt_tokens,
                           finished=bool(last.finish_reason), finish_reason=last.finish_reason, queued_s=queued_s)

    async def _grant(self, req: EngineRequest, token_ids: list[int], call: GenerateCall,
                     end: asyncio.Future[tuple[int, str]]) -> None:
        """A held call's turn: the grant to its caller, then its slot kept until the caller releases it."""
        queued_s = (req.first_scheduled_s or req.arrival_s) - req.arrival_s
        self.front.put(req.request_id, ModelServerGrant(
            req.request_id, f"{self._base_url}/v1/completions",
            json.dumps(self._payload(req, token_ids, call)).encode(), req.prompt_tokens, queued_s))
        req.output_tokens, reason = await end
        if reason in ENDED_BY_ITSELF:
            req.finished_s = time.monotonic()
        self.front.finish(req, reason or "abort")

    # -- helpers -------------------------------------------------------------------------
    async def _tokenize(self, call: GenerateCall) -> list[int]:
        body: dict[str, Any] = {"model": self._served_model}
        if call.prompt:
            body["prompt"] = call.prompt
        else:
            body.update(messages=[{"role": r, "content": c} for r, c in call.messages], add_generation_prompt=True)
        try:
            reply = await self._http.post_json(f"{self._base_url}/tokenize", body, timeout_s=30.0)
        except HttpError as exc:
            raise Unavailable(f"vLLM server {self.cfg.base_url} did not tokenise the prompt: {exc}") from exc
        if reply.status != 200:
            raise server_error(reply.status, reply.content)
        try:
            return list(reply.json()["tokens"])
        except (ValueError, KeyError, TypeError) as exc:  # the server's fault, not the call's
            raise Unavailable(f"vLLM server {self.cfg.base_url} answered /tokenize without its tokens: {exc}") from exc

    def _check_fits(self, prompt_tokens: int, max_tokens: int) -> None:
        if self._max_model_len and prompt_tokens + max_tokens > self._max_model_len:
            raise InvalidArgument(f"prompt {prompt_tokens} + max_tokens {max_tokens} tokens exceeds max_model_len "
                                  f"{self._max_model_len}")
        check_admissible(prompt_tokens, max_tokens, self._load.num_gpu_blocks, self._load.block_size)


def vllm_server_backend(cfg: EngineConfig, queue: AgingPriorityQueue) -> VllmServerBackend:
    """The ``vllm-server`` engine-backend plugin: a running ``vllm serve`` behind hetflow's queue."""
    return VllmServerBackend(cfg.model, cfg.vllm_server, queue, cfg.profile)
