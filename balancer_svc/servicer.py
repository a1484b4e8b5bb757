"""The Balancer gRPC servicer: validate, decide, stream. Everything else lives in the dispatcher."""

from __future__ import annotations

import time
from typing import AsyncIterator, Callable

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
              wait_s: float | None) -> LlmCall:
        """The call a request asks for, which waited ``wait_s`` before it was taken (None: not known)."""
        cfg, now_unix_s = self.dispatcher.cfg, time.time()
        request = convert.identified(request, context.invocation_metadata() or (), now_unix_s)
        call = convert.call_from_proto(request, cfg.max_tokens_limit, now_unix_s, cfg.past_deadline, wait_s,
                                       self.dispatcher.count_prompt)
        return convert.scoped_to_caller(call, CURRENT_CALLER.get())

    @staticmethod
    def _unary_wait_s(context: grpc.aio.ServicerContext) -> float | None:
        """A unary or server-streaming call's wait to be taken, from its deadline (``accept_wait_s``)."""
        return accept_wait_s(context.invocation_metadata() or (), context.time_remaining())

    async def Generate(self, request: balancer_pb2.GenerateRequest,
                       context: grpc.aio.ServicerContext) -> AsyncIterator[balancer_pb2.GenerateChunk]:
        call = self._call(request, context, self._unary_wait_s(context))
        bind_ids(call.request_id, call.workflow.program_id)
        async for chunk in self.serve(call, context.time_remaining()):
            yield chunk

    async def Decide(self, request: balancer_pb2.DecideRequest,
                     context: grpc.aio.ServicerContext) -> balancer_pb2.DispatchDecision:
        return await self._decide(request, context, self._unary_wait_s(context))

    @checks_each_message
    async def DecideStream(self, requests: AsyncIterator[balancer_pb2.DecideStreamRequest],
                           context: grpc.aio.ServicerContext) -> AsyncIterator[balancer_pb2.DecideStreamReply]:
        """``Decide`` per message, each answered as decided (``balancer_svc.decide_stream``). The headers go at
        once, so a client knows the stream is served before it sends a second message
        (``hetflow.runtime.decision_stream``)."""
        await context.send_initial_metadata(())
        async for reply in answer_decisions(requests, lambda request, wait_s: self._decide(request, context, wait_s)):
            yield reply

    async def _decide(self, request: balancer_pb2.DecideRequest, context: grpc.aio.ServicerContext,
                      wait_s: float | None) -> balancer_pb2.DispatchDecision:
        if self.cascade() is not None:
            raise FailedPrecondition("this balancer serves a cascade, which needs the relay path: call Generate")
        call = self._call(request.call, context, wait_s)
        bind_ids(call.request_id, call.workflow.program_id)
        return await self.direct.decide(call, [FailedAttempt.from_proto(f) for f in request.failed])

    async def Workload(self, request: balancer_pb2.WorkloadRequest,
                       context: grpc.aio.ServicerContext) -> balancer_pb2.WorkloadReply:
        workload, now_s = self.dispatcher.workload, time.time()
        return convert.workload_reply(workload.window_s, workload.rate_per_s(now_s), workload.sample(now_s),
                                      self.cascade())

    async def Complete(self, request: balancer_pb2.GenerateRequest,
                       context: grpc.aio.ServicerContext) -> balancer_pb2.CompletionReply:
        call = self._call(request, context, self._unary_wait_s(context))
        bind_ids(call.request_id, call.workflow.program_id)
        chunks = [chunk async for chunk in self.serve(call, context.time_remaining())]
        return convert.completion_reply(call.request_id, chunks)
