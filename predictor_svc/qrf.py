"""Chimera's length predictor (3.4): a quantile random forest of the workflow's total remaining
output tokens Y_r, over the paper's features:

- token counts of the system prompt, the user prompt and the full input;
- workflow and stage identifiers (workflow, agent, stage index, stage count);
- the model name (as a feature, or one forest per model: ``per_model``);
- a text sketch of the user prompt: TF-IDF over uni- and bi-grams, reduced by TruncatedSVD.

Categories never seen in training map to -1 (the unknown-category path), never an exception; with one
forest per model, a model never trained for is answered by every model's forest, each quantile averaged
over them (quantile averaging): no model's forest stands in for it alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
from quantile_forest import RandomForestQuantileRegressor
from sklearn.decomposition import TruncatedSVD
from sklearn.feature_extraction.text import TfidfVectorizer

from hetflow.core.features import FeatureRow, LengthPrediction, PredictItem

CATEGORICAL = ("workflow", "agent", "model")
UNKNOWN = -1.0


@dataclass
class Featurizer:
    svd_dims: int = 32
    tfidf: TfidfVectorizer = field(default_factory=lambda: TfidfVectorizer(ngram_range=(1, 2), max_features=20_000,
                                                                           sublinear_tf=True, min_df=2))
    svd: TruncatedSVD | None = None
    vocab: dict[str, dict[str, float]] = field(default_factory=dict)

    def fit(self, rows: Sequence[FeatureRow]) -> Featurizer:
        texts = [r.user_prompt for r in rows]
        matrix = self.tfidf.fit_transform(texts)
        self.svd = TruncatedSVD(n_components=min(self.svd_dims, matrix.shape[1] - 1), random_state=0).fit(matrix)
        self.vocab = {c: {v: float(i) for i, v in enumerate(sorted({getattr(r, c) for r in rows}))}
                      for c in CATEGORICAL}
        return self

    def transform(self, rows: Sequence[FeatureRow], with_model: bool = True) -> np.ndarray:
        assert self.svd is not None, "featurizer not fitted"
        numeric = np.array([[r.system_prompt_tokens, r.user_prompt_tokens, r.input_tokens, r.stage_index,
                             r.stage_count, *(self.vocab[c].get(getattr(r, c), UNKNOWN)
                                              for c in CATEGORICAL if with_model or c != "model")]
                            for r in rows], dtype=np.float64)
        sketch = self.svd.transform(self.tfidf.transform([r.user_prompt for r in rows]))
        return np.hstack([numeric, sketch])


@dataclass
class QuantileLengthModel:
    """The fitted predictor: a featurizer and either one forest or one per model."""

    featurizer: Featurizer
    per_model: bool
    forests: dict[str, RandomForestQuantileRegressor]
    """Model name -> forest when per_model; "" -> the shared forest otherwise."""
    models: tuple[str, ...]

    def predict(self, rows: Sequence[FeatureRow], quantiles: Sequence[float]) -> np.ndarray:
        """Array (rows, 1 + len(quantiles)): the median, then each requested quantile."""
        qs = [0.5, *quantiles]
        out = np.zeros((len(rows), len(qs)))
        if not rows:
            return out
        if not self.per_model:
            return self._forest_predict(self.forests[""], self.featurizer.transform(rows), qs)
        groups: dict[str, list[int]] = {}
        for i, r in enumerate(rows):
            groups.setdefault(r.model if r.model in self.forests else "", []).append(i)
        for model, idx in groups.items():
            x = self.featurizer.transform([rows[i] for i in idx], with_model=False)
            forests = [self.forests[model]] if model else list(self.forests.values())
            out[idx] = np.mean([self._forest_predict(forest, x, qs) for forest in forests], axis=0)
        return out

    @staticmethod
    def _forest_predict(forest: RandomForestQuantileRegressor, x: np.ndarray, qs: list[float]) -> np.ndarray:
        forest.n_jobs = 1  # serving predicts with n_jobs=1 (issue 3); batching gives the parallelism
        return np.asarray(forest.predict(x, quantiles=qs)).reshape(len(x), len(qs))

    def predict_items(self, items: Sequence[PredictItem]) -> list[LengthPrediction]:
        by_quantiles: dict[tuple[float, ...], list[int]] = {}
        for i, item in enumerate(items):
            by_quantiles.setdefault(item.quantiles, []).append(i)
        results: dict[int, LengthPrediction] = {}
        for qs, idx in by_quantiles.items():
            values = self.predict([items[i].row for i in idx], qs)
            for i, row in zip(idx, values):
                results[i] = LengthPrediction(float(row[0]), tuple(float(v) for v in row[1:]))
        return [results[i] for i in range(len(items))]


def fit_forest(x: np.ndarray, y: np.ndarray, n_estimators: int, seed: int) -> RandomForestQuantileRegressor:
    forest = RandomForestQuantileRegressor(n_estimators=n_estimators, min_samples_leaf=3, max_features=0.5,
                                           random_state=seed, n_jobs=-1)
    return forest.fit(x, y)
