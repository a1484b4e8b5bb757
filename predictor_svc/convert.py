"""protobuf <-> predictor domain types."""

from __future__ import annotations

from hetflow.core.errors import InvalidArgument
from hetflow.v1 import predictor_pb2
from predictor_svc.features import FeatureRow, LengthPrediction, PredictItem


def items_from_proto(msg: predictor_pb2.PredictRequest) -> list[PredictItem]:
    quantiles = tuple(msg.quantiles)
    for q in quantiles:
        if not 0.0 < q < 1.0:
            raise InvalidArgument(f"quantiles must be in (0, 1), got {q}")
    items = []
    for i, r in enumerate(msg.rows):
        if not r.model:
            raise InvalidArgument(f"rows[{i}].model is required")
        items.append(PredictItem(FeatureRow(
            model=r.model, workflow=r.workflow, agent=r.agent, stage_index=r.stage_index,
            stage_count=r.stage_count, system_prompt_tokens=r.system_prompt_tokens,
            user_prompt_tokens=r.user_prompt_tokens, input_tokens=r.input_tokens, user_prompt=r.user_prompt),
            quantiles))
    return items


def prediction_to_proto(p: LengthPrediction) -> predictor_pb2.Prediction:
    return predictor_pb2.Prediction(median_tokens=p.median_tokens, quantile_tokens=list(p.quantile_tokens))
