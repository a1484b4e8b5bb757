"""The decode-length bucket predictor (load-balancer paper, 4.1 and C.12).

Buckets are ranges of expected completion time, not equal token counts: 4.1's 0-0.5 s, 0.5-2 s and 2-4 s
become token edges at a decode rate (``Buckets.at_rate``; the paper's 500 tokens/s gives 250 and 1000,
the last bucket taking everything longer); C.10 gives its DQN three: 0-256, 256-2048 and 2048 up
(``DQN_BUCKETS``). Two predictors, as the paper has:

- ``TextBucketPredictor``: a classifier on the prompt with the task appended as a hint (4.1: the hint
  lifted DistilBERT from 5.5% to 79%); here TF-IDF and logistic regression, the lighter baseline.
- ``LengthBucketPredictor``: a random forest on the prompt's length and the application's name (C.12,
  for when only token counts reach the router).

Both are trained on a trace's calls for one model (the one whose lengths they predict), 80:20 (C.7).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from hetflow.core.trace import StageRecord, split_by_program

COMPLETION_EDGES_S = (0.5, 2.0, 4.0)
"""4.1's bucket boundaries in seconds of decoding."""
HOLDOUT = 0.2
"""C.7: an 80:20 split."""


@dataclass(frozen=True)
class Buckets:
    edges_tokens: tuple[int, ...]
    """Upper bounds of every bucket but the last, ascending."""

    @classmethod
    def at_rate(cls, decode_tokens_per_s: float, edges_s: Sequence[float] = COMPLETION_EDGES_S) -> Buckets:
        """The paper's time buckets in tokens at a decode rate (500 tokens/s: 250, 1000; the last edge,
        4 s, bounds the last bucket, which takes everything longer)."""
        if decode_tokens_per_s <= 0:
            raise ValueError(f"decode_tokens_per_s must be > 0, got {decode_tokens_per_s}")
        return cls(tuple(int(s * decode_tokens_per_s) for s in edges_s[:-1]))

    @property
    def count(self) -> int:
        return len(self.edges_tokens) + 1

    def of(self, decode_tokens: int) -> int:
        return bisect.bisect_left(self.edges_tokens, decode_tokens)


@dataclass(frozen=True)
class Example:
    prompt: str
    task: str
    """The application's name (the trace's workflow family), the paper's task hint."""
    prompt_tokens: int
    bucket: int
    program_id: str


def examples(records: Sequence[StageRecord], model: str, buckets: Buckets) -> list[Example]:
    return [Example(r.user_prompt, r.workflow, r.input_tokens[model], buckets.of(r.output_tokens[model]), r.program_id)
            for r in records if model in r.output_tokens]


class TextBucketPredictor:
    def __init__(self, seed: int = 0) -> None:
        from sklearn.feature_extraction.text import TfidfVectorizer  # training only: the simulator and
        from sklearn.linear_model import LogisticRegression  # the balancer import Buckets without sklearn

        self.vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, max_features=50_000)
        self.classifier: Any = LogisticRegression(max_iter=2000, random_state=seed)

    @staticmethod
    def _text(prompt: str, task: str) -> str:
        return f"{prompt} [task: {task}]"

    def fit(self, data: Sequence[Example]) -> TextBucketPredictor:
        x = self.vectorizer.fit_transform([self._text(e.prompt, e.task) for e in data])
        self.classifier.fit(x, [e.bucket for e in data])
        return self

    def predict(self, prompts: Sequence[str], tasks: Sequence[str]) -> list[int]:
        x = self.vectorizer.transform([self._text(p, t) for p, t in zip(prompts, tasks)])
        return [int(b) for b in self.classifier.predict(x)]


class LengthBucketPredictor:
    def __init__(self, seed: int = 0, trees: int = 100) -> None:
        from sklearn.ensemble import RandomForestClassifier  # training only (TextBucketPredictor)

        self.tasks: dict[str, int] = {}
        self.forest = RandomForestClassifier(n_estimators=trees, random_state=seed, min_samples_leaf=2)

    def _x(self, prompt_tokens: Sequence[int], tasks: Sequence[str]) -> np.ndarray:
        return np.array([[p, self.tasks.get(t, -1)] for p, t in zip(prompt_tokens, tasks)], dtype=float)

    def fit(self, data: Sequence[Example]) -> LengthBucketPredictor:
        self.tasks = {t: i for i, t in enumerate(sorted({e.task for e in data}))}
        self.forest.fit(self._x([e.prompt_tokens for e in data], [e.task for e in data]), [e.bucket for e in data])
        return self

    def predict(self, prompt_tokens: Sequence[int], tasks: Sequence[str]) -> list[int]:
        return [int(b) for b in self.forest.predict(self._x(prompt_tokens, tasks))]


def accuracy(truth: Sequence[int], predicted: Sequence[int], buckets: int) -> dict[str, float]:
    """Overall accuracy, the share of the majority bucket (what always guessing it scores) and the
    accuracy within each true bucket (the paper reports 79% overall with 68% of requests in bucket 0)."""
    out = {"overall": float(np.mean([t == p for t, p in zip(truth, predicted)])),
           "majority_share": max(truth.count(b) for b in range(buckets)) / len(truth) if truth else 0.0}
    for b in range(buckets):
        mine = [p for t, p in zip(truth, predicted) if t == b]
        out[f"bucket_{b}"] = float(np.mean([p == b for p in mine])) if mine else float("nan")
        out[f"bucket_{b}_share"] = len(mine) / len(truth) if truth else 0.0
    return out


def train(records: Sequence[StageRecord], model: str, buckets: Buckets, seed: int = 0
          ) -> tuple[TextBucketPredictor, LengthBucketPredictor, dict[str, dict[str, float]]]:
    """Both predictors fitted on 80% of the trace's programs, their accuracy on the other 20%."""
    data = examples(records, model, buckets)
    if not data:
        raise ValueError(f"the trace has no call answered by {model!r}")
    fitted, held = split_by_program(data, HOLDOUT, seed)
    text, length = TextBucketPredictor(seed).fit(fitted), LengthBucketPredictor(seed).fit(fitted)
    truth = [e.bucket for e in held]
    return text, length, {
        "text_with_task_hint": accuracy(truth, text.predict([e.prompt for e in held], [e.task for e in held]),
                                        buckets.count),
        "forest_on_length_and_application": accuracy(
            truth, length.predict([e.prompt_tokens for e in held], [e.task for e in held]), buckets.count)}


DQN_BUCKETS = Buckets((256, 2048))
"""C.10: "We provide the DQN with 3 buckets: 0-256, 256-2048, >= 2048"."""
