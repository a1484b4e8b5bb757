"""The Router gRPC servicer: batches concurrent calls into the worker pool."""

from __future__ import annotations

import grpc

from hetflow.runtime.batching import BatchCollector
from hetflow.v1 import router_pb2, router_pb2_grpc


class RouterServicer(router_pb2_grpc.RouterServicer):
    def __init__(self, kind: str, models: tuple[str, ...],
                 collector: BatchCollector[str, tuple[dict[str, float], bool]]) -> None:
        self.kind, self.models, self.collector = kind, models, collector

    async def Score(self, request: router_pb2.ScoreRequest, context: grpc.aio.ServicerContext) -> router_pb2.ScoreReply:
        results = await self.collector.submit(list(request.prompts))
        return router_pb2.ScoreReply(
            scores=[router_pb2.ModelConfidence(confidence=conf, truncated=truncated) for conf, truncated in results],
            router_kind=self.kind)

    async def Describe(self, request: router_pb2.DescribeRouterRequest,
                       context: grpc.aio.ServicerContext) -> router_pb2.RouterDescription:
        return router_pb2.RouterDescription(router_kind=self.kind, models=list(self.models))
