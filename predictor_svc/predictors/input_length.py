"""Baseline: the request's input length stands in for its remaining work (Chimera, table 3).

A point proxy carries no spread, so every requested quantile is the same number.
"""

from __future__ import annotations

from hetflow.core.features import LengthPrediction, PredictItem


class InputLengthPredictor:
    def predict_batch(self, items: list[PredictItem]) -> list[LengthPrediction]:
        return [LengthPrediction(float(item.row.input_tokens),
                                 tuple(float(item.row.input_tokens) for _ in item.quantiles))
                for item in items]
