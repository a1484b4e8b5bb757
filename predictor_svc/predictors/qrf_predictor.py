"""The learned predictor (Chimera 3.4): a QRF artifact from ``hetflow train predictor``."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from hetflow.core.features import LengthPrediction, PredictItem
from predictor_svc import artifact as artifacts


class QrfPredictor:
    def __init__(self, artifact: str, models: Sequence[str] = ()) -> None:
        """``artifact``: the directory ``hetflow train predictor`` wrote; ``models``: when given, the
        artifact must have been trained for these."""
        if not artifact:
            raise ValueError("predictor.kind 'qrf' needs predictor.artifact (train one with `hetflow train predictor`)")
        self.model, _ = artifacts.load(Path(artifact), list(models) or None)

    def predict_batch(self, items: list[PredictItem]) -> list[LengthPrediction]:
        return self.model.predict_items(items)
