"""The Python client agent code calls for each LLM call, with its workflow metadata.

    async with HetflowClient("127.0.0.1:50110") as client:
        program = client.program("code", stage_count=4)
        plan = await program.complete("planner", [("system", PLANNER), ("user", task)], max_tokens=256)
        code = await program.complete("coder", [..., ("user", plan.text)], max_tokens=512)

``Program`` fills the program id, the stage index and the upstream agent of each call.

Two paths (docs/architecture.md, "Decisions apart from tokens"): by default the balancer decides each
call and relays its tokens (``Balancer.Generate``); with ``direct=True`` the balancer only decides
(``Balancer.Decide``) and the client streams the tokens from the engine it named, with the dispatch
ticket the decision carried (``hetflow.runtime.direct_call``). A call whose engine fails before its first token
is decided again, on either path.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import AsyncIterator, Sequence

import grpc

from hetflow.core.errors import Unavailable
from hetflow.runtime.accept_wait import sent_timeout
from hetflow.runtime.channels import open_channel
from hetflow.runtime.decision_stream import DecisionStream
from hetflow.runtime.direct_call import DirectCall
from hetflow.runtime.interceptors import rpc_error
from hetflow.runtime.security import SecurityConfig, TlsConfig
from hetflow.v1 import balancer_pb2, balancer_pb2_grpc, common_pb2, engine_pb2_grpc


@dataclass
class CallResult:
    request_id: str
    text: str
    finish_reason: str
    prompt_tokens: int
    output_tokens: int
    model: str
    engine_id: str
    latency_s: float
    receipt: balancer_pb2.Receipt | None = None
    queued_s: float = 0.0
    """Time the call waited in the engine's queue."""


def build_request(messages: Sequence[tuple[str, str]] = (), prompt: str = "", *, max_tokens: int,
                  program_id: str = "", workflow: str = "", agent: str = "", stage_index: int | None = None,
                  stage_count: int | None = None, upstream_agent: str = "", tenant: str = "",
                  deadline_unix_s: float = 0.0, model_pin: str = "", want_receipt: bool = False,
                  ignore_eos: bool = False, temperature: float | None = None,
                  request_id: str = "") -> balancer_pb2.GenerateRequest:
    wf = common_pb2.WorkflowMeta(program_id=program_id, workflow=workflow, agent=agent, upstream_agent=upstream_agent,
                                 tenant=tenant, deadline_unix_s=deadline_unix_s)
    if stage_index is not None:
        wf.stage_index = stage_index
    if stage_count is not None:
        wf.stage_count = stage_count
    sampling = common_pb2.SamplingParams(max_tokens=max_tokens, ignore_eos=ignore_eos)
    if temperature is not None:
        sampling.temperature = temperature
    return balancer_pb2.GenerateRequest(
        request_id=request_id, prompt=prompt, sampling=sampling, workflow=wf, model_pin=model_pin,
        want_receipt=want_receipt, messages=[common_pb2.ChatMessage(role=r, content=c) for r, c in messages])


def call_timeout_s(timeout_s: float | None, deadline_unix_s: float, now_unix_s: float) -> float | None:
    """A call's gRPC timeout: its own, cut to its program's deadline (the servers rank calls by the
    deadline; the client stops waiting at it). A deadline already past fails the call here, as the
    servers would (DEADLINE_EXCEEDED)."""
    if not deadline_unix_s:
        return timeout_s
    left_s = deadline_unix_s - now_unix_s
    if left_s <= 0:
        raise rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, f"the program's deadline passed {-left_s:.3f}s ago")
    return left_s if timeout_s is None else min(timeout_s, left_s)


class HetflowClient:
    def __init__(self, address: str, api_key: str = "", ca_file: str = "",
                 security: SecurityConfig | None = None, direct: bool = False, refusal_attempts: int = 1) -> None:
        """``api_key``: the tenant's key when the stack checks them; ``ca_file``: the CA to verify the
        balancer's certificate with when it serves TLS; ``security``: a service identity's instead (the
        operator's, for ``hetflow replan``); ``direct``: stream tokens from the engines, not through the
        balancer (the engines must be reachable from here, and under mutual TLS only services reach them);
        ``refusal_attempts``: how many times a call the balancer refuses (RESOURCE_EXHAUSTED) is sent in
        all, each after the balancer's retry hint (``hetflow.runtime.channels.refusal_retries``; at most 5;
        1: the caller sees the first refusal)."""
        self.address = address
        if security is None and ca_file:
            security = SecurityConfig(tls=TlsConfig(ca_file=ca_file, mutual=False))
        self._security, self._api_key = security, api_key
        self._channel = open_channel(address, security, api_key, refusal_attempts)
        self.stub = balancer_pb2_grpc.BalancerStub(self._channel)
        self.direct = direct
        self._decisions = DecisionStream(self.stub, refusal_attempts=refusal_attempts) if direct else None
        """The direct path's decisions, on one stream to the balancer (``Balancer.DecideStream``)."""
        self._engine_channels: dict[str, grpc.aio.Channel] = {}

    async def __aenter__(self) -> HetflowClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._decisions is not None:
            await self._decisions.close()
        await self._channel.close()
        for channel in self._engine_channels.values():
            await channel.close()

    def program(self, workflow: str, stage_count: int | None = None, **defaults: object) -> Program:
        return Program(self, workflow, stage_count, defaults)

    def generate(self, request: balancer_pb2.GenerateRequest,
                 timeout_s: float | None = None) -> AsyncIterator[balancer_pb2.GenerateChunk]:
        """Stream one call's chunks. Cancel the returned call (or let its task be cancelled) to abort."""
        if self.direct:
            return DirectCall(self.stub, self._engine_at, request, timeout_s, decisions=self._decisions,
                              balancer_connected=self._connected)
        return self.stub.Generate(request, timeout=timeout_s, metadata=self._sent_timeout(timeout_s))

    def _connected(self) -> bool:
        """Whether the channel to the balancer is connected now (it connects on the first call)."""
        return self._channel.get_state() is grpc.ChannelConnectivity.READY

    def _sent_timeout(self, timeout_s: float | None) -> tuple[tuple[str, str], ...] | None:
        """The metadata that lets the balancer tell how long the call waited to be taken
        (``hetflow.runtime.accept_wait``), on a connected channel only."""
        return sent_timeout(timeout_s, self._connected()) or None

    def _engine_at(self, address: str) -> engine_pb2_grpc.EngineStub:
        channel = self._engine_channels.get(address)
        if channel is None:
            channel = self._engine_channels[address] = open_channel(address, self._security, self._api_key)
        return engine_pb2_grpc.EngineStub(channel)

    async def complete(self, request: balancer_pb2.GenerateRequest, timeout_s: float | None = None) -> CallResult:
        start = time.perf_counter()
        if self.direct:
            chunks = [chunk async for chunk in DirectCall(self.stub, self._engine_at, request, timeout_s,
                                                          decisions=self._decisions,
                                                          balancer_connected=self._connected)]
            if not chunks:  # as the balancer's Complete answers it on the relayed path
                raise Unavailable("the engine ended the call without a reply")
            first, last = chunks[0], chunks[-1]
            return CallResult(first.request_id, "".join(c.text for c in chunks), last.finish_reason,
                              last.usage.prompt_tokens, last.usage.output_tokens, first.model, first.engine_id,
                              time.perf_counter() - start, first.receipt if first.HasField("receipt") else None,
                              last.queued_s)
        reply = await self.stub.Complete(request, timeout=timeout_s, metadata=self._sent_timeout(timeout_s))
        return CallResult(reply.request_id, reply.text, reply.finish_reason, reply.usage.prompt_tokens,
                          reply.usage.output_tokens, reply.model, reply.engine_id, time.perf_counter() - start,
                          reply.receipt if reply.HasField("receipt") else None, reply.queued_s)


@dataclass
class Program:
    """One workflow run: a program id shared by all of its calls (Chimera 3.1)."""

    client: HetflowClient
    workflow: str
    stage_count: int | None
    defaults: dict = field(default_factory=dict)
    program_id: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    stage_index: int = 0
    last_agent: str = ""
    calls: list[CallResult] = field(default_factory=list)

    async def complete(self, agent: str, messages: Sequence[tuple[str, str]], max_tokens: int,
                       timeout_s: float | None = None, **kwargs: object) -> CallResult:
        """The program's next stage. A stage that fails takes no index: the caller's retry is the same stage.
        ``timeout_s`` is cut to the program's ``deadline_unix_s`` (``call_timeout_s``)."""
        options = {**self.defaults, **kwargs}
        stage_index = self.stage_index + 1
        request = build_request(messages, max_tokens=max_tokens, program_id=self.program_id, workflow=self.workflow,
                                agent=agent, stage_index=stage_index, stage_count=self.stage_count,
                                upstream_agent=self.last_agent, **options)
        timeout_s = call_timeout_s(timeout_s, request.workflow.deadline_unix_s, time.time())
        result = await self.client.complete(request, timeout_s)
        self.stage_index, self.last_agent = stage_index, agent
        self.calls.append(result)
        return result

