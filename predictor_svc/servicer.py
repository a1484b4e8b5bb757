"""The Predictor gRPC servicer: batches concurrent calls into the worker pool."""

from __future__ import annotations

import grpc

from hetflow.core.features import LengthPrediction, PredictItem
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
