"""The Balancer gRPC servicer: validate, decide, stream. Everything else lives in the dispatcher."""

from __future__ import annotations

import time
from typing import AsyncIterator, Awaitable, Callable

import grpc

from balancer_svc import convert
from balancer_svc.decide_stream import answer_decisions
from balancer_svc.direct import DirectDecisions, FailedAttempt
from balancer_svc.dispatcher import Dispatcher
from balancer_svc.relay import Relay
from hetflow.core.call import LlmCall
from hetflow.core.cascade.config import CascadeConfig
from hetflow.core.errors import FailedPrecondition
from hetflow.runtime.accept_wait import accept_wait_s
from hetflow.runtime.batch_streams import checks_each_message
from hetflow.runtime.logs import bind_ids
from hetflow.runtime.security import CURRENT_CALLER
from hetflow.v1 import balancer_pb2, balancer_pb2_grpc

Serve = Callable[[LlmCall, "float | None"], AsyncIterator[balancer_pb2.GenerateChunk]]
"""Decide and stream a call: the dispatcher's ``serve``, or a cascade's in front of it."""


class BalancerServicer(balancer_pb2_grpc.BalancerServicer):
    def __init__(self, dispatcher: Dispatcher, serve: Serve | None = None,
                 cascade: Callable[[], CascadeConfig | None] = lambda: None) -> None:
        """``cascade``: the cascade new calls take (``Front.cascade_config``)."""
        self.dispatcher = dispatcher
        self.serve = serve or Relay(dispatcher).serve
        self.cascade = cascade
        self.direct = DirectDecisions(dispatcher)

    def _call(self, request: balancer_pb2.GenerateRequest, context: grpc.aio.ServicerContext,
              on_stream: bool = False, streamed_wait_s: float | None = None) -> LlmCall:
        """The call a request asks for. ``on_stream``: one message of a stream, which waited
        ``streamed_wait_s`` before it was read (a unary call's wait is read from its deadline)."""
        cfg, now_unix_s = self.dispatcher.cfg, time.time()
        metadata = context.invocation_metadata() or ()
        request = convert.identified(request, metadata, now_unix_s)
        wait_s = streamed_wait_s if on_stream else accept_wait_s(metadata, context.time_remaining())
        call = convert.call_from_proto(request, cfg.max_tokens_limit, now_unix_s, cfg.past_deadline, wait_s)
        return convert.scoped_to_caller(call, CURRENT_CALLER.get())

    async def Generate(self, request: balancer_pb2.GenerateRequest,
                       context: grpc.aio.ServicerContext) -> AsyncIterator[balancer_pb2.GenerateChunk]:
        call = self._call(request, context)
        bind_ids(call.request_id, call.workflow.program_id)
        async for chunk in self.serve(call, context.time_remaining()):
            yield chunk

    async def Decide(self, request: balancer_pb2.DecideRequest,
                     context: grpc.aio.ServicerContext) -> balancer_pb2.DispatchDecision:
        return await self._decide(request, context, on_stream=False)

    @checks_each_message
    async def DecideStream(self, requests: AsyncIterator[balancer_pb2.DecideStreamRequest],
                           context: grpc.aio.ServicerContext) -> AsyncIterator[balancer_pb2.DecideStreamReply]:
        """``Decide`` per message, each answered as decided (``balancer_svc.decide_stream``)."""

        def decide(request: balancer_pb2.DecideRequest,
                   wait_s: float | None) -> Awaitable[balancer_pb2.DispatchDecision]:
            return self._decide(request, context, on_stream=True, streamed_wait_s=wait_s)

        async for reply in answer_decisions(requests, decide):
            yield reply

    async def _decide(self, request: balancer_pb2.DecideRequest, context: grpc.aio.ServicerContext,
                      on_stream: bool, streamed_wait_s: float | None = None) -> balancer_pb2.DispatchDecision:
        if self.cascade() is not None:
            raise FailedPrecondition("this balancer serves a cascade, which needs the relay path: call Generate")
        call = self._call(request.call, context, on_stream, streamed_wait_s)
        bind_ids(call.request_id, call.workflow.program_id)
        return await self.direct.decide(call, [FailedAttempt.from_proto(f) for f in request.failed])

    async def Workload(self, request: balancer_pb2.WorkloadRequest,
                       context: grpc.aio.ServicerContext) -> balancer_pb2.WorkloadReply:
        workload, now_s = self.dispatcher.workload, time.time()
        return convert.workload_reply(workload.window_s, workload.rate_per_s(now_s), workload.sample(now_s),
                                      self.cascade())

    async def Complete(self, request: balancer_pb2.GenerateRequest,
                       context: grpc.aio.ServicerContext) -> balancer_pb2.CompletionReply:
        call = self._call(request, context)
        bind_ids(call.request_id, call.workflow.program_id)
        chunks = [chunk async for chunk in self.serve(call, context.time_remaining())]
        return convert.completion_reply(call.request_id, chunks)
