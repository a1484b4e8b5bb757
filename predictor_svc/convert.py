"""protobuf <-> predictor domain types."""

from __future__ import annotations

from hetflow import wire
from hetflow.core.errors import InvalidArgument
from hetflow.core.features import LengthPrediction, PredictItem
from hetflow.v1 import predictor_pb2

MAX_QUANTILES = 16
"""Quantiles one request may ask (the balancer asks one or two): each row is answered at every one."""
MAX_ROWS = 4096
"""Rows one request may carry (the balancer's coalesced batch is 64 calls, a row per candidate model)."""


def items_from_proto(msg: predictor_pb2.PredictRequest) -> list[PredictItem]:
    """The request's rows as items, each at its quantiles; INVALID_ARGUMENT past the bounds, which keep one
    request from holding the service (rows times quantiles are computed on its loop or a worker's)."""
    quantiles = tuple(msg.quantiles)
    if len(quantiles) > MAX_QUANTILES or len(msg.rows) > MAX_ROWS:
        raise InvalidArgument(f"a request carries at most {MAX_QUANTILES} quantiles and {MAX_ROWS} rows, got "
                              f"{len(quantiles)} and {len(msg.rows)}")
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
