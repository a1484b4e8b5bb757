"""A judge learned from traces (Cascadia appendix N, which fine-tunes BERT "on request inputs, outputs,
and quality grades across different models" with a 70/30 split).

hetflow's traces hold each call's question and, per model, the answer's length and the judge's grade
but not the answer's text, so this scorer reads the question (TF-IDF of the user prompt), the model that
answered (one classifier per model) and the answer's length in tokens, and predicts the probability
that the judge takes the answer as right; the grade is that probability on the 0-100 scale. It is the
cheap judge appendix N weighs against the LLM judge: no model call, no added latency, less accurate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from hetflow.core.cascade.config import SCORE_MAX
from hetflow.core.cascade.modelled_judge import JUDGE_AGREEMENT, JUDGED_RIGHT_MIN, judge_grade
from hetflow.core.trace import StageRecord, split_by_program

if TYPE_CHECKING:  # sklearn and scipy load when a scorer is trained or grades, not with the balancer
    from sklearn.feature_extraction.text import TfidfVectorizer

HOLDOUT = 0.3
"""Appendix N: 70% of the traces to train on, 30% held out."""


@dataclass(frozen=True)
class GradedAnswer:
    """One answer of a trace as the scorer learns from it."""

    question: str
    model: str
    answer_tokens: int
    grade: float
    correct: bool
    program_id: str


@dataclass
class LearnedScorer:
    models: tuple[str, ...]
    vectorizer: TfidfVectorizer
    classifiers: dict[str, Any]
    """Per model: predicts whether the judge takes the answer as right (``predict_proba``)."""

    def grades(self, answers: Sequence[tuple[str, str, int]]) -> list[float]:
        """0-100 grades of (question, model, answer tokens) answers; a model the scorer was not trained
        for raises KeyError naming it."""
        out = [0.0] * len(answers)
        by_model: dict[str, list[int]] = {}
        for i, (_, model, _) in enumerate(answers):
            if model not in self.classifiers:
                raise KeyError(f"the learned judge was trained for {list(self.models)}, not {model!r}")
            by_model.setdefault(model, []).append(i)
        for model, rows in by_model.items():
            x = _features(self.vectorizer, [answers[i][0] for i in rows], [answers[i][2] for i in rows])
            right = _positive_column(self.classifiers[model], x)
            for i, p in zip(rows, right):
                out[i] = float(p) * SCORE_MAX
        return out

    def grade(self, question: str, model: str, answer_tokens: int) -> float:
        return self.grades([(question, model, answer_tokens)])[0]


def _features(vectorizer: TfidfVectorizer, questions: Sequence[str], answer_tokens: Sequence[int]) -> Any:
    from scipy import sparse

    lengths = np.array([[math.log1p(max(0, t)) / 10.0] for t in answer_tokens])
    return sparse.hstack([vectorizer.transform(questions), sparse.csr_matrix(lengths)]).tocsr()


def _positive_column(classifier: Any, x: Any) -> np.ndarray:
    proba = classifier.predict_proba(x)
    classes = list(classifier.classes_)
    return proba[:, classes.index(True)] if True in classes else np.zeros(x.shape[0])


def graded_answers(records: Sequence[StageRecord], models: Sequence[str], seed: int = 0,
                   judge_agreement: float = JUDGE_AGREEMENT) -> list[GradedAnswer]:
    """Every call of the trace as each model answered it, graded by the modelled judge (the planner's
    sample grades the same way)."""
    return [GradedAnswer(r.user_prompt, m, r.output_tokens[m],
                         judge_grade(r.correct[m], r.program_id, r.stage_index, m, seed,
                                     judge_agreement=judge_agreement), r.correct[m], r.program_id)
            for r in records for m in models if m in r.correct and m in r.output_tokens]


def fit(answers: Sequence[GradedAnswer], models: Sequence[str], seed: int = 0) -> LearnedScorer:
    from sklearn.dummy import DummyClassifier
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, max_features=50_000)
    vectorizer.fit([a.question for a in answers])
    classifiers: dict[str, Any] = {}
    for model in models:
        mine = [a for a in answers if a.model == model]
        if not mine:
            raise ValueError(f"the training trace has no answer of {model!r}")
        x = _features(vectorizer, [a.question for a in mine], [a.answer_tokens for a in mine])
        y = np.array([a.grade >= JUDGED_RIGHT_MIN for a in mine])
        classifier = (LogisticRegression(C=1.0, max_iter=1000, random_state=seed) if len(set(y)) > 1
                      else DummyClassifier(strategy="prior"))
        classifiers[model] = classifier.fit(x, y)
    return LearnedScorer(tuple(models), vectorizer, classifiers)


def evaluate(scorer: LearnedScorer, held: Sequence[GradedAnswer]) -> dict[str, dict[str, float]]:
    """Per model on held-out answers: agreement of the scorer's verdict (grade >= 50) with the judge's
    (grade >= 60) and with the ground truth, and the AUC of its grade against the judge's verdict."""
    from sklearn.metrics import roc_auc_score

    out: dict[str, dict[str, float]] = {}
    for model in scorer.models:
        mine = [a for a in held if a.model == model]
        if not mine:
            continue
        grades = scorer.grades([(a.question, a.model, a.answer_tokens) for a in mine])
        judged = [a.grade >= JUDGED_RIGHT_MIN for a in mine]
        said = [g >= SCORE_MAX / 2 for g in grades]
        out[model] = {
            "answers": float(len(mine)),
            "judge_agreement": float(np.mean([s == j for s, j in zip(said, judged)])),
            "truth_agreement": float(np.mean([s == a.correct for s, a in zip(said, mine)])),
            "auc_vs_judge": float(roc_auc_score(judged, grades)) if 0 < sum(judged) < len(judged) else float("nan")}
    return out


def train(records: Sequence[StageRecord], models: Sequence[str], seed: int = 0
          ) -> tuple[LearnedScorer, dict[str, dict[str, float]]]:
    """Fit on 70% of the trace's programs; metrics on the other 30% (appendix N's split)."""
    answers = graded_answers(records, models, seed)
    if not answers:
        raise ValueError(f"the trace has no call answered by any of {list(models)}")
    fitted, held = split_by_program(answers, HOLDOUT, seed)
    scorer = fit(fitted, models, seed)
    return scorer, evaluate(scorer, held)
