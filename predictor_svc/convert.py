"""protobuf <-> predictor domain types."""

from __future__ import annotations

from hetflow import wire
from hetflow.core.errors import InvalidArgument
from hetflow.core.features import LengthPrediction, PredictItem
from hetflow.v1 import predictor_pb2


def items_from_proto(msg: predictor_pb2.PredictRequest) -> list[PredictItem]:
    quantiles = tuple(msg.quantiles)
    for q in quantiles:
        if not 0.0 < q < 1.0:
            raise InvalidArgument(f"quantiles must be in (0, 1), got {q}")
    items = []
    for i, r in enumerate(msg.rows):
        if not r.model:
            raise InvalidArgument(f"rows[{i}].model is required")
        items.append(PredictItem(wire.feature_row_from_proto(r), quantiles))
    return items


def prediction_to_proto(p: LengthPrediction) -> predictor_pb2.Prediction:
    return predictor_pb2.Prediction(median_tokens=p.median_tokens, quantile_tokens=list(p.quantile_tokens))
