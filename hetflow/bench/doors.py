"""Doors to one pool: the same trace, at the same arrival times, through each front door to the same
simulated vLLM servers (``hetflow serve vllm-sim``), live (issue 33).

    python -m hetflow.bench.doors --pool examples/vllm-sim-pool.yaml --family agent --programs 40 \\
        --rate 0.2 --doors client-rr,vllm-router:round_robin,vllm-router:program,hetflow

Doors, each configured as its own documentation tells an operator:
- ``client-rr``: the client itself round-robins calls over the servers (no router);
- ``vllm-router:<policy>``: vLLM's router with one of its HTTP policies;
- ``vllm-router:program``: vLLM's router with Program scheduling (``hetflow.bench.vllm_router``);
- ``hetflow``: hetflow's gateway, balancer and ``vllm-server`` engines in front of the servers, which
  then run vLLM's ``--scheduling-policy priority`` as hetflow's docs ask (the vLLM doors keep vLLM's
  default, ``fcfs``).

Each door gets a fresh pool (empty caches), the same warm-up calls first (excluded: enough for vLLM's
router's statistics to mature), then the trace. One client replays it in each door's dialect: the
``hetflow`` body field for hetflow, ``vllm_xargs.agentic_context`` and ``x-session-id`` for the vLLM
doors (docs/vllm-sim.md has the mapping). Prompts are built from the trace's parts with exactly their
token counts in the servers' tokenizer (``hetflow.bench.prompts``: each part's own text cut to its
tokens, filler after a shorter one), with each ancestor's real answer in place of its output, so prefix
reuse is the trace's.

Every time constant is the trace's times ``time_scale`` (arrivals, tool gaps; the routers' are scaled
by their configuration), and every reported time is divided by it. Each door's row says whether the
host kept up: the share of engine iterations more than 5% late (``hetflow_sim:step_late_share``), a
run with more than 1% of them flagged and not to be quoted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Iterable, Mapping, Sequence

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from hetflow import stackctl
from hetflow.bench.common import OUT_DIR, machine
from hetflow.bench.flame import flame_graphs
from hetflow.bench.gate_series import SAMPLE_S, GateSample, GateSeries, gate_sample_of
from hetflow.bench.prompts import PromptText, conversation, part_texts
from hetflow.bench.vllm_router import agentic_context, program_scheduling_config, router_binary, router_command
from hetflow.core.call import LlmCall, SamplingSpec, WorkflowInfo
from hetflow.core.engine.profile import EngineProfile, EngineSpec, load_profile
from hetflow.core.features import FeatureRow, feature_row
from hetflow.core.monitor.state import MonitorLimits
from hetflow.core.policies.program_admission import ledgers_of
from hetflow.core.policies.workflow_ttl import WorkflowTtl
from hetflow.core.policy_config import PolicyConfig
from hetflow.core.presets import resolve
from hetflow.core.trace import StageRecord, agent_calls_again, programs
from hetflow.runtime import tinymodel
from hetflow.runtime.config import load_stack
from hetflow.runtime.ports import free_port
from simulator.metrics import queueing_share, summarize
from simulator.run import ProgramResult, SimulatedCall, Simulation, prompts_alone, reference_latency_s
from simulator.settle import StopBelowSlo, certainly_missed, stopped_summary
from simulator.signals import Signals

ANSI = re.compile(r"\x1b\[[0-9;]*m")
ROUTER_EVENT = re.compile(r"^(?P<at>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d).*event=\"(?P<event>program_admit|program_pause)\""
                          r" program=(?P<program>[0-9a-f]+)")
"""A Program-scheduling decision line of vLLM's router's log (0.1.17's format)."""
CLIENT_RETRIES = 2
"""The official ``openai`` client's default ``max_retries``: what an agent framework's calls get."""
LATE_SHARE_LIMIT = 0.05
LATE_ITERATIONS_LIMIT = 0.01
"""A run with more than 1% of engine iterations over 5% late measured the host: flagged, not quoted."""
SETTLE_CHECK_S = 5.0
"""How often, on the host's clock, a live probe counts the programs that missed the SLO for certain
(``stop_when_settled``): only how soon a failing probe stops."""
ROUTER_REQUEST_TIMEOUT_S = 1800.0
"""vLLM's router's ``--request-timeout-secs`` default, at GPU speed (scaled with the pool)."""
WARMUP_PROGRAMS = 120
WARMUP_CALLS = 6
WARMUP_RATE_PER_S = 8.0
"""The warm-up before the trace, excluded from the figures: 120 programs of 6 calls, each resuming the
last with its answer, 8 programs a second of GPU time. vLLM's router keeps its statistics per rank and
switches its growth reserve and fitted TTL on only when a rank's windows hold 100 completions and 100
tool gaps (``stats_window_size``, src/program_scheduling/factors.rs): 600 gaps spread over the ranks by
its hash fill every window of a 4-engine pool."""


@dataclass
class Door:
    """One front door: where calls go, in which dialect, and the processes it runs."""

    name: str
    pool_config: Path
    urls: list[str]
    dialect: str
    """``hetflow`` or ``vllm``."""
    stack_config: Path | None = None
    router: subprocess.Popen[bytes] | None = None
    router_log: IO[bytes] | None = None
    router_metrics_port: int = 0
    """vLLM's router's Prometheus port (0: no router)."""
    time_scale: float = 1.0
    retried_calls: int = 0
    """Refusals the client retried (``send``)."""
    _next: int = 0

    def url_for_call(self) -> str:
        url = self.urls[self._next % len(self.urls)]
        self._next += 1
        return url

    def processes(self) -> dict[str, int]:
        """The door's own processes by name (their CPU time is charged per call)."""
        if self.router is not None:
            return {"vllm-router": self.router.pid}
        if self.stack_config is not None:
            state = stackctl.read_state(load_stack(self.stack_config)) or {}
            return {name: s["pid"] for name, s in state.get("services", {}).items()
                    if s.get("pid") and not name.startswith("vllm-sim:")}
        return {}


RENDERING_DOORS = ("vllm-router:cache_aware",)
"""Doors whose router tokenizes each request through the workers' render routes (vLLM's router 0.1.17's
``cache_aware`` matches token prefixes and asks ``/v1/chat/completions/render``, which vLLM serves only
with ``--enable-scale-out``): their servers run with it, as an operator of that door would."""


def pool_engines(pool: dict[str, Any]) -> tuple[float, list[EngineSpec]]:
    """A vllm-sim pool's time scale, which its servers must share, and its servers as the twin's engines."""
    scales = {float(s.get("time_scale", 1.0)) for s in pool["vllm_sim"]}
    if len(scales) != 1:
        raise SystemExit("the pool's servers must share one time_scale")
    return scales.pop(), [EngineSpec(s["name"], s.get("served_model_name") or load_profile(s["profile"]).model,
                                     load_profile(s["profile"])) for s in pool["vllm_sim"]]


def pool_stack(pool: dict[str, Any], out: Path, door: str, scheduling_policy: str) -> tuple[Path, dict[str, Any]]:
    """The pool's servers on free ports, as a stack of their own (or the base of hetflow's); with the
    scale-out routes for a door in ``RENDERING_DOORS``."""
    raw = json.loads(json.dumps(pool))
    raw["stack"] = {**raw.get("stack", {}), "name": f"doors-{door.replace(':', '-')}-{os.getpid()}"}
    for server in raw["vllm_sim"]:
        server.update(port=free_port(), scheduling_policy=scheduling_policy,
                      enable_scale_out=door in RENDERING_DOORS)
    path = out / f"pool-{door.replace(':', '-')}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path, raw


def retention_scaled(time_scale: float) -> dict[str, float]:
    """The default retention rule's parameters with its longest hold in the pool's seconds."""
    retention = PolicyConfig().retention
    if retention.type != "workflow-ttl":
        raise ValueError(f"the default retention rule is {retention.type!r}: scale its time constants here")
    return {**retention.params, "max_hold_s": WorkflowTtl(**retention.params).max_hold_s * time_scale}


PREDICTORS = ("input-length", "qrf")
"""What hetflow's door predicts remaining work with: the example stack's input-length baseline (Chimera
table 3), or the batched QRF the design serves (Chimera 3.4), the artifact its sweeps read."""


def check_predictor(predictor: str) -> None:
    """Raise ValueError unless ``predictor`` is one of ``PREDICTORS``."""
    if predictor not in PREDICTORS:
        raise ValueError(f"unknown predictor {predictor!r}: one of {', '.join(PREDICTORS)}")


def predictor_dir_for(models: Sequence[str]) -> Path:
    """The QRF artifact for the pool's models: the one ``hetflow.learned`` trains once for a stack and the
    sweeps read (``router: learned``, ``predictor: learned``)."""
    from hetflow.learned import ensure_trained

    return ensure_trained(list(models))[1]


def predictor_section(predictor: str, models: Sequence[str]) -> dict[str, Any]:
    """The stack's ``predictor`` section for ``predictor`` (one of ``PREDICTORS``)."""
    check_predictor(predictor)
    section: dict[str, Any] = {"port": free_port(), "metrics_port": free_port(), "kind": predictor}
    if predictor == "qrf":
        section.update(artifact=str(predictor_dir_for(models)), models=list(models))
    return section


def hetflow_stack(raw: dict[str, Any], time_scale: float, predictor: str = "input-length") -> dict[str, Any]:
    """hetflow in front of the pool: each server an engine with the ``vllm-server`` backend, the
    default policy, the gateway as the door, ``predictor`` its remaining-work predictor (``PREDICTORS``).
    Its time constants are scaled as the router's are: each engine reports its server's profile slowed by
    ``time_scale``, the retention rule's longest hold and the time the monitor counts a program between
    its calls (``program_idle_after_s``, longer than the agent family's tool gaps: unscaled, half of them
    at time scale 2) are their defaults' in GPU time, and a call waits for
    KV room as long as vLLM's router lets a call wait (``ROUTER_REQUEST_TIMEOUT_S``), where the simulated
    twin's hold has no limit: at the balancer's default (120 s of the host's clock) a probe at time scale
    2 refused calls the twin kept.
    The balancer counts prompts with the servers' tokenizer, as an operator names it (``tokenizers``):
    the approximate count put the race's prompts 14-18% over, and held twice the twin's new programs
    out of KV (docs/vllm-sim.md)."""
    host = raw.get("stack", {}).get("host", "127.0.0.1")
    engines = []
    for server in raw["vllm_sim"]:
        profile = load_profile(server["profile"])
        engines.append({"name": server["name"], "port": free_port(), "metrics_port": free_port(),
                        "backend": "vllm-server", "profile": profile.slowed(time_scale).to_dict(),
                        "vllm_server": {"base_url": f"http://{host}:{server['port']}",
                                        "served_model": server.get("served_model_name") or profile.model,
                                        "max_num_seqs": profile.max_num_seqs}})
    models = sorted({e["vllm_server"]["served_model"] for e in engines})
    tokenizers = {(s.get("served_model_name") or load_profile(s["profile"]).model): s.get("tokenizer")
                  or str(tinymodel.DEFAULT_DIR) for s in raw["vllm_sim"]}
    idle_s = MonitorLimits().program_idle_after_s * time_scale
    return {**raw, "monitor": {"port": free_port(), "metrics_port": free_port(), "program_idle_after_s": idle_s},
            "router": {"port": free_port(), "metrics_port": free_port(), "kind": "fixed-prior",
                       "models": {m: 0.5 for m in models}},
            "predictor": predictor_section(predictor, models),
            "balancer": {"port": free_port(), "metrics_port": free_port(),
                         "max_hold_s": ROUTER_REQUEST_TIMEOUT_S * time_scale, "tokenizers": tokenizers,
                         "policy": {"retention_params": retention_scaled(time_scale)}},
            "gateway": {"port": free_port()}, "engines": engines}


def open_door(name: str, pool: dict[str, Any], time_scale: float, out: Path, predictor: str) -> Door:
    """Start a fresh pool and the door in front of it (hetflow's with ``predictor``); on any failure,
    nothing is left running."""
    kind, _, policy = name.partition(":")
    if name not in ("hetflow", "client-rr") and (kind != "vllm-router" or not policy):
        raise ValueError(f"unknown door {name!r}: client-rr, vllm-router:<policy>, vllm-router:program or hetflow")
    binary = router_binary() if kind == "vllm-router" else ""
    path, raw = pool_stack(pool, out, name, "priority" if name == "hetflow" else "fcfs")
    if name == "hetflow":
        raw = hetflow_stack(raw, time_scale, predictor)
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
    door = Door(name, path, [], "hetflow" if name == "hetflow" else "vllm",
                stack_config=path if name == "hetflow" else None, time_scale=time_scale)
    try:
        if stackctl.up(path, 300, detach=False) != 0:
            raise RuntimeError(f"{path}: the stack did not start")
        host = raw["stack"].get("host", "127.0.0.1")
        urls = [f"http://{host}:{s['port']}" for s in raw["vllm_sim"]]
        if name == "hetflow":
            door.urls = [f"http://{host}:{raw['gateway']['port']}"]
        elif name == "client-rr":
            door.urls = urls
        else:
            door.urls = [start_router(door, binary, urls, policy, raw, time_scale, out)]
        return door
    except BaseException:
        close_door(door)
        raise


def start_router(door: Door, binary: str, urls: list[str], policy: str, raw: dict[str, Any], time_scale: float,
                 out: Path) -> str:
    """vLLM's router in front of ``urls``; its URL. Program scheduling as its docs configure it (the
    calibration written beside the results), other policies as they are."""
    port = free_port()
    program = program_scheduling_config(load_profile(raw["vllm_sim"][0]["profile"]), time_scale) \
        if policy == "program" else None
    (out / f"vllm-router-{policy}-config.json").write_text(json.dumps(program or {}, indent=1))
    door.router_log = open(out / f"vllm-router-{policy}.log", "wb")
    door.router_metrics_port = free_port()
    command = router_command(urls, port, door.router_metrics_port, "consistent_hash" if program else policy,
                             program, binary, request_timeout_s=ROUTER_REQUEST_TIMEOUT_S * time_scale)
    door.router = subprocess.Popen(command, stdout=door.router_log, stderr=subprocess.STDOUT)
    return f"http://127.0.0.1:{port}"


def close_door(door: Door) -> None:
    """Stop the router (killed if it will not stop) and the stack, whatever fails on the way."""
    try:
        if door.router is not None:
            door.router.terminate()
            try:
                door.router.wait(timeout=30)
            except subprocess.TimeoutExpired:
                door.router.kill()
                door.router.wait(timeout=30)
    finally:
        if door.router_log is not None:
            door.router_log.close()
        stackctl.down(door.stack_config or door.pool_config)


async def wait_serving(door: Door, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=5) as client:
        for url in door.urls:
            while True:
                try:
                    if (await client.get(f"{url}/health")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{door.name}: {url} did not answer /health")
                await asyncio.sleep(0.5)


@dataclass
class StageCall:
    record: StageRecord
    messages: list[dict[str, str]]
    model: str
    parent_agent: str = ""
    """The agent whose answer this call continues, when another (vLLM's parent program)."""
    root_agent: str = ""
    agent_step: int = 0
    """The agent's own count of calls before this one."""
    resumes: bool = False
    """The agent has a later call in the workflow."""


def body_for(door: Door, call: StageCall, deadline_unix_s: float) -> tuple[dict[str, Any], dict[str, str]]:
    """The call in the door's dialect: its body and headers."""
    record = call.record
    body: dict[str, Any] = {"model": call.model, "messages": call.messages,
                            "max_tokens": record.output_tokens[call.model], "ignore_eos": True, "stream": True,
                            "stream_options": {"include_usage": True}}
    if door.dialect == "hetflow":
        body["hetflow"] = {"program_id": record.program_id, "workflow": record.workflow, "agent": record.agent,
                           "stage_index": record.stage_index, "stage_count": record.stage_count,
                           "upstream_agent": record.upstream_agent, "tenant": record.tenant}
        if deadline_unix_s:
            body["hetflow"]["deadline_unix_s"] = deadline_unix_s
        return body, {}
    scoped: dict[str, Any] = {"deadline_seconds": max(0.0, deadline_unix_s - time.time())} if deadline_unix_s else {}
    parent = f"{record.program_id}:{call.parent_agent}" if call.parent_agent else ""
    root = call.root_agent or record.agent
    body["vllm_xargs"] = agentic_context(f"{record.program_id}:{record.agent}", call.agent_step, parent,
                                         expected_resume=call.resumes, task_id=record.program_id,
                                         agent_id=record.agent, root_program_id=f"{record.program_id}:{root}",
                                         agent_role="lead" if record.agent == root else "subagent", **scoped)
    return body, {"x-session-id": record.program_id}


async def send(client: httpx.AsyncClient, door: Door, body: dict[str, Any], headers: dict[str, str]
               ) -> tuple[str, float, float]:
    """One streamed call: its answer text, and when its first and last token came (host seconds). A
    refusal before the stream starts is retried as the official ``openai`` client retries it."""
    for attempt in range(CLIENT_RETRIES + 1):
        try:
            return await _stream_once(client, door, body, headers)
        except Retryable as refused:
            if attempt == CLIENT_RETRIES:
                raise RuntimeError(str(refused)) from refused
            door.retried_calls += 1
            await asyncio.sleep(refused.backoff_s(attempt) * door.time_scale)
    raise AssertionError("unreachable")


class Retryable(Exception):
    """A failure the ``openai`` client retries (openai-python ``_should_retry``): an answer of 408, 409,
    429 or 5xx, or a connection lost before the answer's status (``APIConnectionError``: an idle
    kept-alive connection the server closed as the client reused it)."""

    def __init__(self, message: str, retry_after: str | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    def backoff_s(self, attempt: int) -> float:
        """The server's ``retry-after`` when it gives one of at most 60 s, else 0.5 s doubling up to 8 s."""
        try:
            if self.retry_after is not None and 0 < float(self.retry_after) <= 60:
                return float(self.retry_after)
        except ValueError:
            pass
        return min(0.5 * 2 ** attempt, 8.0)


async def _stream_once(client: httpx.AsyncClient, door: Door, body: dict[str, Any], headers: dict[str, str]
                       ) -> tuple[str, float, float]:
    answered = False
    try:
        async with client.stream("POST", f"{door.url_for_call()}/v1/chat/completions", json=body,
                                 headers=headers) as reply:
            answered = True
            return await _read_stream(reply)
    except httpx.TransportError as error:
        if answered:
            raise
        raise Retryable(f"{type(error).__name__} before the answer: {error}") from error


async def _read_stream(reply: httpx.Response) -> tuple[str, float, float]:
    """An answer's streamed text, and when its first and last token came (host seconds)."""
    if reply.status_code in (408, 409, 429) or reply.status_code >= 500:
        raise Retryable(f"HTTP {reply.status_code}: {(await reply.aread())[:300]!r}", reply.headers.get("retry-after"))
    if reply.status_code != 200:
        raise RuntimeError(f"HTTP {reply.status_code}: {(await reply.aread())[:300]!r}")
    first_s, text = 0.0, []
    async for line in reply.aiter_lines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if "error" in chunk:
            raise RuntimeError(f"stream error: {chunk['error']}")
        for choice in chunk.get("choices", []):
            piece = choice.get("delta", {}).get("content") or ""
            if piece and not first_s:
                first_s = time.perf_counter()
            text.append(piece)
    return "".join(text), first_s, time.perf_counter()


def sent_feature_row(record: StageRecord, model: str, text: PromptText, texts: Mapping[str, str]) -> FeatureRow:
    """The QRF's features (Chimera 3.4) of ``record``'s call as this harness sends it (``conversation``,
    ``texts`` its program's ``part_texts``), as hetflow's live door reads them."""
    messages = conversation(record, defaultdict(str), text, model, texts)
    chat = tuple((m["role"], m["content"]) for m in messages)
    return feature_row(LlmCall(
        request_id=record.program_id, prompt="", messages=chat,
        sampling=SamplingSpec(max_tokens=record.output_tokens[model]),
        workflow=WorkflowInfo(record.program_id, record.workflow, record.agent, record.stage_index,
                              record.stage_count, record.upstream_agent),
        known_input_tokens=record.input_tokens[model]), model)


async def replay_program(client: httpx.AsyncClient, door: Door, program: list[StageRecord], text: PromptText,
                         model: str, t0: float, time_scale: float, engines: Sequence[EngineSpec],
                         slo_scale: float, started: dict[str, ProgramResult] | None = None) -> ProgramResult:
    """One program's calls through the door at the trace's times; ``started``, where given, holds its result
    from its arrival on (what ``stop_when_settled`` counts)."""
    first = program[0]
    await asyncio.sleep(max(0.0, t0 + first.arrival_s * time_scale - time.perf_counter()))
    arrived = time.perf_counter()
    result = ProgramResult(first.program_id, first.workflow, (arrived - t0) / time_scale)
    result.isolated_s = reference_latency_s(program, engines)
    if started is not None:
        started[result.program_id] = result
    deadline = time.time() + slo_scale * result.isolated_s * time_scale if first.tenant != "default" else 0.0
    if deadline:
        result.deadline_s = result.arrival_s + slo_scale * result.isolated_s
    profile = engines[0].profile
    alone = prompts_alone(program, model, profile.block_size)
    answers: dict[int, str] = {}
    texts = part_texts(program)
    done = {r.stage_index: asyncio.Event() for r in program}

    async def stage(record: StageRecord) -> None:
        for d in record.depends_on:
            await done[d].wait()
        await asyncio.sleep(record.tool_s * time_scale)
        upstream = next((r.agent for r in program if r.stage_index in record.depends_on
                         and r.agent != record.agent), "")
        step = sum(1 for r in program if r.agent == record.agent and r.stage_index < record.stage_index)
        call = StageCall(record, conversation(record, answers, text, model, texts), model, upstream, first.agent, step,
                         agent_calls_again(program, record))
        body, headers = body_for(door, call, deadline)
        sent = time.perf_counter()
        answer, first_s, done_s = await send(client, door, body, headers)
        waited_s = client_wait_s(sent, first_s or done_s, alone[record.stage_index], profile, time_scale)
        sent_at, started_at = (sent - t0) / time_scale, (sent + waited_s - t0) / time_scale
        result.calls[record.stage_index] = SimulatedCall(
            record.stage_index, "", sent_at, started_at, (done_s - t0) / time_scale, record.output_tokens[model], 0,
            queued_intervals_s=[(sent_at, started_at)] if waited_s else [],
            first_token_s=((first_s or done_s) - t0) / time_scale)
        answers[record.stage_index] = answer
        done[record.stage_index].set()

    async with asyncio.TaskGroup() as stages:  # a failed call cancels its program's other calls
        for record in program:
            stages.create_task(stage(record))
    result.finished_s = (time.perf_counter() - t0) / time_scale
    result.model = model
    result.correct = first.correct.get(model)
    return result


def settled_misses(started: Iterable[ProgramResult], now_s: float, slo_scale: float) -> int:
    """The programs, of those arrived, that have missed the SLO for certain at ``now_s`` (``simulator.settle``)."""
    return sum(certainly_missed(r.arrival_s, slo_scale * r.isolated_s, r.finished_s, now_s) for r in started)


async def stop_when_settled(started: Mapping[str, ProgramResult], programs_count: int, t0: float, time_scale: float,
                            rule: StopBelowSlo, replays: Sequence[asyncio.Task[Any]],
                            check_s: float = SETTLE_CHECK_S) -> dict[str, float | int]:
    """Issue 32's stop for a live probe: once more than ``1 - attainment`` of the trace's programs have
    missed the SLO for certain, no later call can make the probe pass, so its ``replays`` are cancelled
    there; what it knew then, as the simulator's stopped probe says it (``SettledMisses.summary``)."""
    while True:
        await asyncio.sleep(check_s)
        now_s = (time.perf_counter() - t0) / time_scale
        late = settled_misses(started.values(), now_s, rule.slo_scale)
        if rule.settled(late, programs_count):
            for replay in replays:
                replay.cancel()
            return stopped_summary(now_s, late, programs_count)


def client_wait_s(sent_s: float, first_token_s: float, prompt_alone: tuple[int, int], profile: EngineProfile,
                  time_scale: float = 1.0) -> float:
    """Waiting, as the client can tell it: the first token's delay beyond the prefill the call would need
    alone (``prompt_alone``: its prompt and the tokens its ancestors left cached, as exclusive latency
    counts them), the same for every door, live or simulated. It holds the door's holds and queues and the
    server's, and the prefill's slowdown by the batch it shares."""
    alone_s = profile.isolated_request_s(prompt_alone[0], 1, prompt_alone[1]) * time_scale
    return max(0.0, first_token_s - sent_s - alone_s)


def as_the_client_sees(results: Sequence[ProgramResult], records: Sequence[StageRecord],
                       engines: Sequence[EngineSpec]) -> list[ProgramResult]:
    """The twin's programs with each call's waits replaced by ``client_wait_s``'s, as the live replay
    records them: its queueing share is then the live row's (``client_queueing_share``). The simulator's
    own share counts only time queued or held, not a prefill slowed by its batch."""
    by_program = programs(records)
    by_id = {e.engine_id: e for e in engines}
    seen = []
    for result in results:
        program, alone = by_program[result.program_id], {}
        calls = {}
        for stage, call in result.calls.items():
            engine = by_id[call.engine_id]
            kind = (engine.model, engine.profile.block_size)
            if kind not in alone:
                alone[kind] = prompts_alone(program, *kind)
            waited_s = client_wait_s(call.dispatched_s, call.first_token_s, alone[kind][stage], engine.profile)
            calls[stage] = replace(call, queued_intervals_s=[(call.dispatched_s, call.dispatched_s + waited_s)]
                                   if waited_s else [])
        seen.append(replace(result, calls=calls))
    return seen


def failure(exc: BaseException) -> str:
    """A failed program's cause in one line: its first failed call's error, out of the program's task
    group (``replay_program``)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


def warmup_trace(model: str, programs_count: int = WARMUP_PROGRAMS) -> list[StageRecord]:
    """Independent agent loops of ``WARMUP_CALLS`` calls (a 256-token task, then 64 tokens of tool result
    after each answer), one lead agent each, ``WARMUP_RATE_PER_S`` of them a second: every door, and the
    simulator beside it, starts with the router's statistics mature and programs seen resuming."""
    calls, records = WARMUP_CALLS, []
    for i in range(programs_count):
        parts: list[dict[str, Any]] = [{"text": f"warmup-{i}", "tokens": 256}]
        for stage in range(1, calls + 1):
            if stage > 1:
                parts = [*parts, {"output_of": stage - 1}, {"text": f"warmup-{i}/{stage}", "tokens": 64}]
            tokens = 256 + (stage - 1) * (32 + 64)
            records.append(StageRecord(f"warmup-{i}", "warmup", "loop", stage, calls, "lead", "",
                                       [stage - 1] if stage > 1 else [], "", "", {model: tokens}, {model: 32}, {},
                                       i / WARMUP_RATE_PER_S, prompt_parts=list(parts)))
    return records


def trace_start_s(warmup_programs: int) -> float:
    """When the replayed trace starts in the simulated twin, in GPU seconds from the warm-up's first
    arrival: once the warm-up's last program has had a minute (``warmup_trace``)."""
    return (warmup_programs - 1) / WARMUP_RATE_PER_S + 60.0 if warmup_programs > 0 else 0.0


async def warm_up(door: Door, text: PromptText, model: str, programs_count: int, time_scale: float,
                  engines: Sequence[EngineSpec]) -> int:
    """The warm-up trace through the door, as the trace is replayed; its results are dropped, and how
    many of its programs failed is returned."""
    groups = list(programs(warmup_trace(model, programs_count)).values())
    async with httpx.AsyncClient(timeout=None, limits=httpx.Limits(max_connections=None)) as client:
        t0 = time.perf_counter()
        done = await asyncio.gather(*(replay_program(client, door, g, text, model, t0, time_scale, engines, 5.0)
                                      for g in groups), return_exceptions=True)
    return sum(isinstance(r, BaseException) for r in done)


COUNTERS = {"vllm:prefix_cache_queries_total": "prefix_queries", "vllm:prefix_cache_hits_total": "prefix_hits",
            "vllm:request_queue_time_seconds_sum": "queue_s", "vllm:e2e_request_latency_seconds_sum": "e2e_s",
            "hetflow_sim:step_late_share_count": "iterations", "vllm:e2e_request_latency_seconds_count": "calls",
            "vllm:time_to_first_token_seconds_sum": "ttft_s", "vllm:num_preemptions_total": "preemptions"}


def counters_of(metrics_text: str) -> dict[str, float]:
    """One server's ``/metrics``: prefix-cache queries and hits, queue, first-token and end-to-end seconds,
    preemptions, iterations, and iterations more than ``LATE_SHARE_LIMIT`` late."""
    out = dict.fromkeys([*COUNTERS.values(), "late_iterations"], 0.0)
    on_time = 0.0
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name in COUNTERS:
                out[COUNTERS[sample.name]] += sample.value
            elif (sample.name == "hetflow_sim:step_late_share_bucket"
                  and float(sample.labels.get("le", "nan")) == LATE_SHARE_LIMIT):
                on_time += sample.value
    out["late_iterations"] = out["iterations"] - on_time
    return out


PREFIX_DECISIONS = "vllm_router_prefix_routing_decisions_total"
"""vLLM's router's count of its prefix-matching policies' decisions, labelled by policy, stage and outcome
(``prefix_hit``, ``prefix_miss``, ``load_imbalance``, ``missing_tokens``: no tokens, the least loaded
worker taken)."""


def prefix_decisions_of(metrics_text: str) -> dict[str, float]:
    """The router's ``PREFIX_DECISIONS`` per set of labels (a worker's label, if any, summed over). Only
    its own lines are parsed: the router's page holds series that Prometheus's parser refuses (a summary
    whose labels repeat ``quantile``, router 0.1.17)."""
    own = "\n".join(line for line in metrics_text.splitlines() if PREFIX_DECISIONS in line)
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(own):
        for sample in family.samples:
            if sample.name == PREFIX_DECISIONS:
                key = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()) if k != "worker")
                out[key] = out.get(key, 0.0) + sample.value
    return out


def router_prefix_decisions(door: Door) -> dict[str, float]:
    """``prefix_decisions_of`` the door's router; empty for a door without one."""
    if not door.router_metrics_port:
        return {}
    return prefix_decisions_of(httpx.get(f"http://127.0.0.1:{door.router_metrics_port}/metrics", timeout=10).text)


DOOR_WAITS = {"hetflow_balancer_decision_seconds": "decision", "hetflow_balancer_held_seconds": "held",
              "hetflow_engine_front_queue_seconds": "engine_queue"}
"""hetflow's own waits, each a histogram of its services: deciding (call received -> sent), held for KV room
in the balancer, queued in an engine's priority queue before its server has it."""
RELEASE_ROUNDS = {"hetflow_balancer_release_round_seconds": "release_round",
                  "hetflow_balancer_held_redecided_total": "redecided"}
"""The balancer's rounds of deciding held calls again (a histogram of each round's seconds) and the held
calls they decided again (a counter): how long a round takes live, where the twin decides one at once."""


def door_waits_of(metrics_texts: Sequence[str]) -> dict[str, float]:
    """The seconds (``<wait>_s``) and counts (``<wait>_calls``) of ``DOOR_WAITS``, summed over the
    services' ``/metrics`` pages; with the ``RELEASE_ROUNDS``' seconds (``release_round_s``), rounds
    (``release_round_count``) and calls decided again (``redecided_count``) where a page has them."""
    out: dict[str, float] = {}
    for text in metrics_texts:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                name, _, part = sample.name.rpartition("_")
                if name in DOOR_WAITS and part in ("sum", "count"):
                    key = f"{DOOR_WAITS[name]}_{'s' if part == 'sum' else 'calls'}"
                elif name in RELEASE_ROUNDS and part in ("sum", "count"):
                    key = f"{RELEASE_ROUNDS[name]}_{'s' if part == 'sum' else 'count'}"
                elif sample.name in RELEASE_ROUNDS:
                    key = f"{RELEASE_ROUNDS[sample.name]}_count"
                else:
                    continue
                out[key] = out.get(key, 0.0) + sample.value
    return out


def release_rounds(waits: dict[str, float], time_scale: float) -> dict[str, float]:
    """The balancer's rounds over the trace (``door_waits_of``'s difference): how many, the mean round in
    seconds of GPU time and the held calls a round decided again; empty without a round."""
    rounds = waits.get("release_round_count", 0.0)
    if not rounds:
        return {}
    return {"rounds": rounds, "round_s_mean": waits.get("release_round_s", 0.0) / time_scale / rounds,
            "redecided_per_round": waits.get("redecided_count", 0.0) / rounds}


def door_waits(door: Door) -> dict[str, float]:
    """``door_waits_of`` hetflow's balancer and engines (empty for a door without them)."""
    if door.stack_config is None:
        return {}
    raw = load_stack(door.stack_config)
    host = raw.get("stack", {}).get("host", "127.0.0.1")
    ports = [raw["balancer"]["metrics_port"], *(e["metrics_port"] for e in raw["engines"])]
    return door_waits_of([httpx.get(f"http://{host}:{port}/metrics", timeout=10).text for port in ports])


async def sample_gate(client: httpx.AsyncClient, door: Door, t0: float, gate: GateSeries) -> None:
    """Sample hetflow's gate inputs (``hetflow.bench.gate_series``) every ``SAMPLE_S`` of GPU time through
    the trace, until cancelled; nothing for a door without hetflow's services."""
    if door.stack_config is None:
        return
    raw = load_stack(door.stack_config)
    host = raw.get("stack", {}).get("host", "127.0.0.1")
    urls = [f"http://{host}:{raw[service]['metrics_port']}/metrics" for service in ("monitor", "balancer")]
    while True:
        await asyncio.sleep(SAMPLE_S * door.time_scale)
        try:
            pages = await asyncio.gather(*(client.get(url, timeout=10) for url in urls))
        except httpx.HTTPError:
            continue  # a sample missed, not the probe
        gate.add((time.perf_counter() - t0) / door.time_scale, gate_sample_of([page.text for page in pages]))


def wait_per_call_s(results: Sequence[ProgramResult]) -> dict[str, float]:
    """Each call's mean wait, in seconds of GPU time: the client's view (``client_wait_s``, as the live
    replay records it) or, for the twin's own records, held in the balancer and queued in an engine."""
    calls = [c for r in results for c in r.calls.values()]
    if not calls:
        return {}
    held = sum(end - start for c in calls for start, end in c.held_intervals_s)
    return {"queued": sum(c.queued_s for c in calls) / len(calls), "held": held / len(calls)}


TRANSIT_UNMATCHED = 0.002
"""The share of calls the client and the servers may count apart for ``door_transit_s_per_call``."""


def door_transit_s_per_call(results: Sequence[ProgramResult], servers: Mapping[str, float], time_scale: float
                            ) -> dict[str, float] | None:
    """The door's own time a call, in seconds of GPU time: what the client saw of its calls beyond what the
    servers saw of them (``servers``: the pool's summed ``counters_of`` over the trace), before the first
    token (the door's decision, holds, queue and hops on the way in: the client's time to it less the
    servers' ``vllm:time_to_first_token_seconds``) and after it (the stream's hops on the way out). The
    twin has neither, so this is what the door adds to a program's path live (issue 64). ``results``: every
    program's calls that ended, a stopped probe's unfinished programs' too. None where the client's calls
    are not the servers' (failed or retried calls); a stopped probe may count up to ``TRANSIT_UNMATCHED``
    of them apart (calls whose last chunk was on its way when the replay was cancelled)."""
    calls = [c for r in results for c in r.calls.values()]
    if not calls or abs(len(calls) - servers["calls"]) > TRANSIT_UNMATCHED * len(calls):
        return None
    to_first_s = sum(c.first_token_s - c.dispatched_s for c in calls) - servers["ttft_s"] / time_scale
    after_first_s = (sum(c.finished_s - c.first_token_s for c in calls)
                     - (servers["e2e_s"] - servers["ttft_s"]) / time_scale)
    return {"to_first_token": to_first_s / len(calls), "after_first_token": after_first_s / len(calls)}


def server_counters(pool_path: Path) -> list[dict[str, float]]:
    """``counters_of`` each of the pool's servers."""
    raw = load_stack(pool_path)
    host = raw.get("stack", {}).get("host", "127.0.0.1")
    return [counters_of(httpx.get(f"http://{host}:{server['port']}/metrics", timeout=10).text)
            for server in raw["vllm_sim"]]


def call_shares(calls: Sequence[float]) -> list[float]:
    """Each engine's share of the calls, largest first: how evenly a door spread them."""
    total = sum(calls)
    return sorted((round(c / total, 3) for c in calls), reverse=True) if total else []


async def idle_cpu(processes: dict[str, int], seconds: float) -> dict[str, float]:
    """Each of the door's processes' CPU seconds per second with no call in flight, over ``seconds`` before
    the warm-up (0: not measured): their reports, polls and heartbeats, which a run's CPU per call carries
    spread over its calls, so the figure per call above it is the calls' own work."""
    if seconds <= 0:
        return {}
    before = cpu_by_process(processes)
    await asyncio.sleep(seconds)
    return {name: (cpu_s - before[name]) / seconds for name, cpu_s in cpu_by_process(processes).items()}


def cpu_by_process(processes: dict[str, int]) -> dict[str, float]:
    """``cpu_seconds`` of each process, by name."""
    return {name: cpu_seconds(pid) for name, pid in processes.items()}


def cpu_seconds(pid: int) -> float:
    """User plus system CPU of the process, from /proc (0 where it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def hold_summary(held_s: Sequence[float]) -> dict[str, float]:
    """How long vLLM's router held room for its paused programs: count, median and 90th percentile."""
    if not held_s:
        return {"pauses": 0}
    ordered = sorted(held_s)
    return {"pauses": len(ordered), "p50_s": ordered[len(ordered) // 2],
            "p90_s": ordered[int(0.9 * (len(ordered) - 1))]}


def router_holds(log_text: str, since_unix_s: float, time_scale: float) -> list[float]:
    """From vLLM's router's log: for each ``program_pause`` of a program admitted at or after
    ``since_unix_s``, the time since that ``program_admit``, in GPU seconds (the log's timestamps are UTC, to
    the second)."""
    admitted: dict[str, float] = {}
    held = []
    for line in log_text.splitlines():
        match = ROUTER_EVENT.search(ANSI.sub("", line))
        if match is None:
            continue
        at = datetime.strptime(match["at"], "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()
        if match["event"] == "program_admit":
            admitted[match["program"]] = at
        elif match["program"] in admitted:
            admitted_at = admitted.pop(match["program"])
            if admitted_at >= since_unix_s:
                held.append((at - admitted_at) / time_scale)
    return held


def run_door(name: str, pool: dict[str, Any], records: Sequence[StageRecord], args: argparse.Namespace,
             text: PromptText, engines: Sequence[EngineSpec], out: Path,
             stop_below_slo: StopBelowSlo | None = None) -> dict[str, Any]:
    door = open_door(name, pool, args.time_scale, out, args.predictor)
    try:
        return asyncio.run(measure(door, records, args, text, engines, out, stop_below_slo))
    finally:
        close_door(door)


async def measure(door: Door, records: Sequence[StageRecord], args: argparse.Namespace, text: PromptText,
                  engines: Sequence[EngineSpec], out: Path, stop_below_slo: StopBelowSlo | None = None
                  ) -> dict[str, Any]:
    """Warm the door up, replay the trace through it, and read what the client and the servers saw (with
    ``args.profile``, a flame graph of each of the door's processes over the trace, into ``out``). With
    ``stop_below_slo`` the replay stops once its SLO failure is settled (``stop_when_settled``): the row
    then says only that (``settled``), what the programs finished by then did, and the host's figures."""
    await wait_serving(door)
    idle_by_process = await idle_cpu(door.processes(), args.idle_s)
    model = engines[0].model
    warmup_failed = await warm_up(door, text, model, args.warmup_programs, args.time_scale, engines)
    before, wall_before_s = server_counters(door.pool_config), time.monotonic()
    processes = door.processes()
    cpu_before = cpu_by_process(processes)
    decisions_before, waits_before = router_prefix_decisions(door), door_waits(door)
    door.retried_calls = 0  # the trace's, not the warm-up's
    groups = list(programs(records).values())
    gate = GateSeries()
    trace_start_unix_s = time.time()
    profiled = (flame_graphs(processes, out, door.name.replace(":", "-"))
                if args.profile else contextlib.nullcontext())
    with profiled:
        async with httpx.AsyncClient(timeout=None, limits=httpx.Limits(max_connections=None)) as client:
            started: dict[str, ProgramResult] = {}
            t0 = time.perf_counter()
            tasks = [asyncio.create_task(replay_program(client, door, g, text, model, t0, args.time_scale, engines,
                                                        args.slo_scale, started)) for g in groups]
            sampler = asyncio.create_task(sample_gate(client, door, t0, gate))
            stop = (asyncio.create_task(stop_when_settled(started, len(groups), t0, args.time_scale, stop_below_slo,
                                                          tasks)) if stop_below_slo is not None else None)
            done = await asyncio.gather(*tasks, return_exceptions=True)
            sampler.cancel()
            settled = stop.result() if stop is not None and stop.done() else None
            if stop is not None and not stop.done():
                stop.cancel()
    after = server_counters(door.pool_config)
    trace_cpu_s = {name: cpu_s - cpu_before[name] for name, cpu_s in cpu_by_process(processes).items()}
    trace_wall_s = time.monotonic() - wall_before_s
    decisions = {k: v - decisions_before.get(k, 0.0) for k, v in router_prefix_decisions(door).items()}
    waits = {k: v - waits_before.get(k, 0.0) for k, v in door_waits(door).items()}
    results = [r for r in done if isinstance(r, ProgramResult)]
    errors = [failure(e) for e in done if isinstance(e, BaseException) and not isinstance(e, asyncio.CancelledError)]
    summary: dict[str, Any] = (summarize(results, (), args.slo_scale) if settled is None else
                               {"settled": settled, "finished_programs": len(results)})
    per_server = [{k: a[k] - b[k] for k in a} for a, b in zip(after, before)]
    delta = {k: sum(d[k] for d in per_server) for k in per_server[0]}
    calls = sum(len(r.calls) for r in results)
    tokens = sum(c.output_tokens for r in results for c in r.calls.values())
    gate_until_s = summary.get("arrival_span_s") if settled is None else float(settled["stopped_at_s"])
    return {"door": door.name, **summary, **gate.row_entry(gate_until_s),
            "client_queueing_share": summary.get("queueing_share"),
            "failed_programs": len(errors), "first_errors": errors[:5],
            "retried_calls": door.retried_calls, "warmup_failed_programs": warmup_failed,
            **server_entries(per_server),
            **({"router_prefix_decisions": decisions} if decisions else {}),
            "client_wait_s_per_call": wait_per_call_s(results)["queued"] if calls else None,
            "door_transit_s_per_call": door_transit_s_per_call(list(started.values()), delta, args.time_scale),
            **({"door_wait_s_per_call": {k[:-2]: v / args.time_scale / calls for k, v in waits.items()
                                         if k.endswith("_s") and k[:-2] in DOOR_WAITS.values()},
                "door_waits": waits} if waits and calls else {}),
            **({"release_rounds": rounds} if (rounds := release_rounds(waits, args.time_scale)) else {}),
            **({"router_holds": hold_summary(router_holds(Path(door.router_log.name).read_text(), trace_start_unix_s,
                                                          args.time_scale))}
               if door.name == "vllm-router:program" and door.router_log is not None else {}),
            **door_cpu_entries(trace_cpu_s, idle_by_process, trace_wall_s, calls, tokens)}


def server_entries(per_server: Sequence[Mapping[str, float]]) -> dict[str, Any]:
    """What the pool's servers counted over the trace (``server_counters``' deltas, one mapping a server):
    preemptions, prefix hits, their queueing share, late iterations (the host kept up while at most
    ``LATE_ITERATIONS_LIMIT`` of them were more than 5% late) and each server's share of the calls."""
    delta = {k: sum(d[k] for d in per_server) for k in per_server[0]}
    late = delta["late_iterations"] / delta["iterations"] if delta["iterations"] else 0.0
    return {"preemptions": delta["preemptions"],
            "prefix_hit_rate": delta["prefix_hits"] / delta["prefix_queries"] if delta["prefix_queries"] else 0.0,
            "server_queueing_share": delta["queue_s"] / delta["e2e_s"] if delta["e2e_s"] else 0.0,
            "late_iteration_share": late, "host_kept_up": late <= LATE_ITERATIONS_LIMIT,
            "call_shares": call_shares([d["calls"] for d in per_server])}


def door_cpu_entries(trace_cpu_s: Mapping[str, float], idle_by_process: Mapping[str, float], trace_wall_s: float,
                     calls: int, tokens: int) -> dict[str, Any]:
    """The door's processes' CPU over the trace (``trace_cpu_s``, by process), a call and a token, and above
    what they burn idle (``idle_by_process``, CPU seconds a second) over the trace's ``trace_wall_s``."""
    idle_cpu_s_per_s = sum(idle_by_process.values())
    door_cpu_s = sum(trace_cpu_s.values())
    above_idle_s = door_cpu_s - idle_cpu_s_per_s * trace_wall_s
    return {"door_cpu_ms_per_call": 1e3 * door_cpu_s / calls if calls else None,
            "door_cpu_us_per_token": 1e6 * door_cpu_s / tokens if tokens else None,
            "door_idle_cpu_ms_per_s": 1e3 * idle_cpu_s_per_s,
            "door_idle_cpu_ms_per_s_by_process": {name: 1e3 * s for name, s in idle_by_process.items()},
            "door_cpu_ms_per_call_by_process": {name: 1e3 * s / calls for name, s in trace_cpu_s.items()}
            if calls else {},
            "door_cpu_ms_per_call_above_idle": 1e3 * above_idle_s / calls if calls else None,
            "door_cpu_us_per_token_above_idle": 1e6 * above_idle_s / tokens if tokens else None}


SIMULATED_AS = {"client-rr": "round-robin", "vllm-router:round_robin": "round-robin",
                "vllm-router:program": "vllm-router-program", "vllm-router:cache_aware": "vllm-router-cache-aware",
                "vllm-router:power_of_two": "vllm-router-power-of-two",
                "vllm-router:consistent_hash": "vllm-router-consistent-hash", "hetflow": "hetflow"}
"""The simulator's preset for each door it has one for (docs/rivals.md), run on the same trace and
engines for the simulator-vs-live error."""


def twin_spec(name: str, time_scale: float) -> str:
    """The door's preset as the live harness runs the door: Program scheduling with the session header the
    harness sends (``body_for``) and the force-resume floor the router keeps in its own clock (30 s, so
    30 / ``time_scale`` of GPU time); the servers report no cached tokens (the preset's default, as vLLM's)."""
    if name != "vllm-router:program":
        return SIMULATED_AS[name]
    return f"{SIMULATED_AS[name]}:session_header=true,force_resume_floor_s={30.0 / time_scale:g}"


def simulated_row(name: str, records: Sequence[StageRecord], engines: Sequence[EngineSpec],
                  slo_scale: float, warmup_programs: int = WARMUP_PROGRAMS,
                  predictor: str = "input-length", time_scale: float = 1.0) -> dict[str, Any]:
    """The door's preset in the simulator, on the trace the door replayed after the same warm-up (its
    programs dropped from the figures; the trace starts once the warm-up's last program has had a minute),
    with the signals the live door has: fixed priors and ``predictor`` (the input-length baseline, or the
    same QRF artifact's predictions for every call), and engines that cannot pin a retained program's KV,
    as the servers (vLLM's) cannot. ``time_scale``: the live pool's (``twin_spec``)."""
    preset = resolve(twin_spec(name, time_scale))
    warmup = warmup_trace(engines[0].model, warmup_programs)
    signals = twin_signals(predictor if name == "hetflow" else "input-length", [*warmup, *records], engines)
    sim = Simulation.from_preset(engines, preset, signals, pins_retained_kv=False)
    start_s = trace_start_s(warmup_programs)
    gate = GateSeries()

    def sample() -> None:
        resident = [sim.monitor.resident(record, sim.loop.now) for record in sim.monitor.engines.values()]
        gate.add(sim.loop.now - start_s, GateSample(sum(r.tokens for r in resident), sum(r.programs for r in resident),
                                                    len(sim.decisions.held), sum(r.growth_tokens for r in resident)))

    sim.loop.at(start_s, sim.loop.every, SAMPLE_S, sample)  # from the trace's start, as the live door samples
    shifted = [replace(r, arrival_s=r.arrival_s + start_s) for r in records]
    results = [replace(r, arrival_s=r.arrival_s - start_s, finished_s=r.finished_s - start_s)
               for r in sim.run([*warmup, *shifted]) if not r.program_id.startswith("warmup-")]
    calls = Counter(c.engine_id for r in results for c in r.calls.values())
    ledger = ledgers_of(sim.pipeline.store).get("")   # the router's one pool of every engine
    seen = as_the_client_sees(results, records, engines)
    own = wait_per_call_s(results)
    summary = summarize(results, sim.decision_ms, slo_scale)
    return {"door": f"sim:{name}", "preset": preset.name, **summary, **gate.row_entry(summary.get("arrival_span_s")),
            "client_queueing_share": queueing_share(seen),
            "client_wait_s_per_call": wait_per_call_s(seen).get("queued"),
            "twin_wait_s_per_call": {"held": own.get("held"), "engine_queue": own["queued"] - own["held"]}
            if own else {},
            "prefix_hit_rate": sim.prefix_hit_rate, "call_shares": call_shares([calls[e.engine_id] for e in engines]),
            **({"router_holds": hold_summary([held for at, held in ledger.holds if at >= start_s])}
               if ledger is not None else {})}


def twin_signals(predictor: str, records: Sequence[StageRecord], engines: Sequence[EngineSpec]) -> Signals:
    """What the twin is told in place of hetflow's router and predictor: fixed priors, and ``predictor``'s
    predictions (for the QRF, its artifact run over ``records`` as predictor_svc runs it, on the trace's
    system prompts and texts: the live door is sent the same texts cut to the trace's tokens, from which
    the QRF predicts 1.000x the work at the median, docs/vllm-sim.md "The cause: the live predictor read
    the harness's filler")."""
    check_predictor(predictor)
    if predictor == "input-length":
        return Signals("prior", "input-length")
    from hetflow.bench.learned_signals import learned_signals

    models = sorted({e.model for e in engines})
    return Signals("prior", "learned", learned=learned_signals(records, models, None, predictor_dir_for(models)))


def main(argv: list[str] | None = None) -> int:
    from hetflow.bench.common import exit_on_sigterm
    from hetflow.workloads.generate import generate

    exit_on_sigterm()

    p = argparse.ArgumentParser(prog="python -m hetflow.bench.doors", description=__doc__.split("\n\n")[0])
    p.add_argument("--pool", default="examples/vllm-sim-pool.yaml", help="stack config with the vllm_sim servers")
    p.add_argument("--doors", default="client-rr,vllm-router:round_robin,vllm-router:program,hetflow")
    p.add_argument("--family", default="agent")
    p.add_argument("--programs", type=int, default=40)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rate", type=float, default=0.2, help="programs per second of GPU time")
    p.add_argument("--slo-scale", type=float, default=5.0)
    p.add_argument("--warmup-programs", type=int, default=WARMUP_PROGRAMS)
    p.add_argument("--out", default=None)
    p.add_argument("--idle-s", type=float, default=10.0,
                   help="seconds the door's idle CPU is measured for before its warm-up (0: not measured)")
    p.add_argument("--profile", action="store_true",
                   help="record a py-spy flame graph of each of a door's processes over the trace, into --out")
    p.add_argument("--predictor", choices=PREDICTORS, default="input-length",
                   help="hetflow's remaining-work predictor: the example stack's input-length, or the QRF")
    p.add_argument("--simulate", action="store_true",
                   help="also run each door's simulator preset on the same trace (the simulator-vs-live error)")
    args = p.parse_args(argv)
    pool = load_stack(Path(args.pool))
    args.time_scale, engines = pool_engines(pool)
    records = generate(args.family, args.programs, args.seed, [engines[0].model], rate_per_s=args.rate)
    out = Path(args.out) if args.out else OUT_DIR / "doors"
    out.mkdir(parents=True, exist_ok=True)
    text = PromptText(pool["vllm_sim"][0].get("tokenizer", ""))
    result: dict[str, Any] = {
        "command": "python -m hetflow.bench.doors " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": machine(), "time_scale": args.time_scale, "programs": args.programs, "rows": []}
    for name in args.doors.split(","):
        try:
            row = run_door(name, pool, records, args, text, engines, out)
        except Exception as exc:  # noqa: BLE001 - one door's failure is its row; the others still run
            row = {"door": name, "error": f"{type(exc).__name__}: {exc}"}
        result["rows"].append(row)
        if args.simulate and name in SIMULATED_AS:
            result["rows"].append(simulated_row(name, records, engines, args.slo_scale, args.warmup_programs,
                                                predictor=args.predictor, time_scale=args.time_scale))
            print(_sim_line(result["rows"][-1], row), flush=True)
        (out / "results.json").write_text(json.dumps(result, indent=1))  # after every door: nothing lost
        print(_line(row), flush=True)
    print(f"-> {out}/results.json")
    return 0 if all("error" not in r for r in result["rows"]) else 1


def _line(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"{row['door']:<26} failed: {row['error']}"
    lat = row.get("latency_s", {})
    return (f"{row['door']:<26} {row.get('programs', 0):>4} programs  p50 {lat.get('p50', 0):7.2f} s  "
            f"p95 {lat.get('p95', 0):7.2f} s  within {row.get('within_slo_share', 0):.0%}  "
            f"hit {row['prefix_hit_rate']:.0%}  queue {row['server_queueing_share']:.1%}  "
            f"late {row['late_iteration_share']:.1%}{'' if row['host_kept_up'] else ' (HOST BEHIND)'}  "
            f"failed {row['failed_programs']}  retried {row['retried_calls']}  "
            f"door CPU {_ms(row['door_cpu_ms_per_call'])} a call, {_ms(row['door_cpu_ms_per_call_above_idle'])} "
            f"above idle ({row['door_idle_cpu_ms_per_s']:.1f} ms/s idle)")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def _sim_line(sim: dict[str, Any], live: dict[str, Any]) -> str:
    """The simulated row, with its error against the live one (when the live door ran)."""
    lat, live_lat = sim.get("latency_s", {}), live.get("latency_s", {})
    errors = "".join(f"  {q} error {lat[q] / live_lat[q] - 1:+.0%}" for q in ("p50", "p95")
                     if live_lat.get(q) and lat.get(q))
    return (f"{sim['door']:<26} {sim.get('programs', 0):>4} programs  p50 {lat.get('p50', 0):7.2f} s  "
            f"p95 {lat.get('p95', 0):7.2f} s  within {sim.get('within_slo_share', 0):.0%}  "
            f"hit {sim['prefix_hit_rate']:.0%}{errors}")


if __name__ == "__main__":
    raise SystemExit(main())
