"""The Predictor gRPC servicer: batches concurrent calls into the worker pool."""

from __future__ import annotations

from typing import AsyncIterator

import grpc

from hetflow.core.features import LengthPrediction, PredictItem
from hetflow.runtime.batch_streams import answer_in_order, checks_each_message
from hetflow.runtime.batching import BatchCollector
from hetflow.v1 import predictor_pb2, predictor_pb2_grpc
from predictor_svc import convert


class PredictorServicer(predictor_pb2_grpc.PredictorServicer):
    def __init__(self, kind: str, collector: BatchCollector[PredictItem, LengthPrediction]) -> None:
        self.kind, self.collector = kind, collector

    async def Predict(self, request: predictor_pb2.PredictRequest,
                      context: grpc.aio.ServicerContext) -> predictor_pb2.PredictReply:
        predictions = await self.collector.submit(convert.items_from_proto(request))
        return predictor_pb2.PredictReply(predictions=[convert.prediction_to_proto(p) for p in predictions],
                                          predictor_kind=self.kind)

    @checks_each_message
    async def PredictStream(self, requests: AsyncIterator[predictor_pb2.PredictRequest],
                            context: grpc.aio.ServicerContext) -> AsyncIterator[predictor_pb2.PredictReply]:
        """Predict on one stream, each batch answered in order (``hetflow.runtime.batch_streams``)."""
        async for reply in answer_in_order(requests, lambda r: self.Predict(r, context),
                                           predictor_pb2.PredictReply, context):
            yield reply
