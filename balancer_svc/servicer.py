"""The Balancer gRPC servicer: validate, decide, stream. Everything else lives in the dispatcher."""

from __future__ import annotations

import time
from typing import AsyncIterator

import grpc

from balancer_svc import convert
from balancer_svc.dispatcher import Dispatcher
from hetflow.core.call import LlmCall
from hetflow.runtime.logs import bind_ids
from hetflow.runtime.security import CURRENT_CALLER
from hetflow.v1 import balancer_pb2, balancer_pb2_grpc


class BalancerServicer(balancer_pb2_grpc.BalancerServicer):
    def __init__(self, dispatcher: Dispatcher) -> None:
        self.dispatcher = dispatcher

    def _call(self, request: balancer_pb2.GenerateRequest) -> LlmCall:
        call = convert.call_from_proto(request, self.dispatcher.cfg.max_tokens_limit, time.time(),
                                       self.dispatcher.cfg.past_deadline)
        return convert.scoped_to_caller(call, CURRENT_CALLER.get())

    async def Generate(self, request: balancer_pb2.GenerateRequest,
                       context: grpc.aio.ServicerContext) -> AsyncIterator[balancer_pb2.GenerateChunk]:
        call = self._call(request)
        bind_ids(call.request_id, call.workflow.program_id)
        async for chunk in self.dispatcher.serve(call, context.time_remaining()):
            yield chunk

    async def Complete(self, request: balancer_pb2.GenerateRequest,
                       context: grpc.aio.ServicerContext) -> balancer_pb2.CompletionReply:
        call = self._call(request)
        bind_ids(call.request_id, call.workflow.program_id)
        chunks = [chunk async for chunk in self.dispatcher.serve(call, context.time_remaining())]
        return convert.completion_reply(call.request_id, chunks)
