"""The learned judge (Cascadia appendix N): learns grades from questions, models and answer lengths."""

import pytest

from hetflow.core.cascade.learned_scorer import GradedAnswer, fit, train
from hetflow.workloads.generate import generate

SMALL, LARGE = "qwen2.5-1.5b-instruct", "qwen2.5-7b-instruct"


def _answers(n: int) -> list[GradedAnswer]:
    """Hard questions: the small model's answers graded low, the large one's high; easy ones high for both."""
    out = []
    for i in range(n):
        hard = i % 2 == 0
        question = f"{'prove the hard theorem' if hard else 'add two small numbers'} variant {i}"
        out.append(GradedAnswer(question, SMALL, 50, 10.0 if hard else 90.0, not hard, f"p{i}"))
        out.append(GradedAnswer(question, LARGE, 50, 90.0, True, f"p{i}"))
    return out


def test_the_scorer_learns_which_questions_the_small_model_fails():
    scorer = fit(_answers(80), [SMALL, LARGE])
    hard, easy = scorer.grade("prove the hard theorem variant 999", SMALL, 50), \
        scorer.grade("add two small numbers variant 999", SMALL, 50)
    assert hard < 50 < easy
    assert scorer.grade("prove the hard theorem variant 999", LARGE, 50) > 50
    assert all(0 <= g <= 100 for g in scorer.grades([("anything", SMALL, 3), ("else", LARGE, 0)]))


def test_a_model_it_was_not_trained_for_is_named():
    scorer = fit(_answers(10), [SMALL, LARGE])
    with pytest.raises(KeyError, match="qwen2.5-14b"):
        scorer.grade("q", "qwen2.5-14b-instruct", 10)


def test_training_on_a_trace_reports_held_out_agreement_per_model():
    scorer, metrics = train(generate("math", 60, 0, models=[SMALL, LARGE]), [SMALL, LARGE])
    assert set(metrics) == {SMALL, LARGE} and scorer.models == (SMALL, LARGE)
    assert all(0 <= v["judge_agreement"] <= 1 and v["answers"] > 0 for v in metrics.values())
