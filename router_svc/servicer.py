"""The Router gRPC servicer: batches concurrent calls into the worker pool."""

from __future__ import annotations

from typing import AsyncIterator

import grpc

from hetflow.core.errors import InvalidArgument
from hetflow.runtime.batch_streams import answer_in_order, checks_each_message
from hetflow.runtime.batching import BatchCollector
from hetflow.v1 import router_pb2, router_pb2_grpc

MAX_PROMPTS = 4096
"""Prompts one request may carry (the balancer's coalesced batch is 64 calls): past it INVALID_ARGUMENT,
so that one request cannot queue every other caller behind it (the predictor's ``MAX_ROWS``)."""


class RouterServicer(router_pb2_grpc.RouterServicer):
    def __init__(self, kind: str, models: tuple[str, ...],
                 collector: BatchCollector[str, tuple[dict[str, float], bool]]) -> None:
        self.kind, self.models, self.collector = kind, models, collector

    async def Score(self, request: router_pb2.ScoreRequest, context: grpc.aio.ServicerContext) -> router_pb2.ScoreReply:
        if len(request.prompts) > MAX_PROMPTS:
            raise InvalidArgument(f"a request carries at most {MAX_PROMPTS} prompts, got {len(request.prompts)}")
        results = await self.collector.submit(list(request.prompts))
        return router_pb2.ScoreReply(
            scores=[router_pb2.ModelConfidence(confidence=conf, truncated=truncated) for conf, truncated in results],
            router_kind=self.kind)

    @checks_each_message
    async def ScoreStream(self, requests: AsyncIterator[router_pb2.ScoreRequest],
                          context: grpc.aio.ServicerContext) -> AsyncIterator[router_pb2.ScoreReply]:
        """Score on one stream, each batch answered in order (``hetflow.runtime.batch_streams``)."""
        async for reply in answer_in_order(requests, lambda r: self.Score(r, context),
                                           router_pb2.ScoreReply, context):
            yield reply

    async def Describe(self, request: router_pb2.DescribeRouterRequest,
                       context: grpc.aio.ServicerContext) -> router_pb2.RouterDescription:
        return router_pb2.RouterDescription(router_kind=self.kind, models=list(self.models))
