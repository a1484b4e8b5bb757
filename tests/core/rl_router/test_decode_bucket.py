"""The decode-length bucket predictor (load-balancer paper, 4.1, C.10, C.12)."""

import pytest

from hetflow.core.rl_router.decode_bucket import (
    DQN_BUCKETS,
    Buckets,
    Example,
    LengthBucketPredictor,
    TextBucketPredictor,
    accuracy,
    train,
)
from hetflow.core.trace import split_by_program
from hetflow.workloads.generate import generate


def test_buckets_are_completion_times_at_a_rate_and_c10s_token_edges():
    assert Buckets.at_rate(500.0).edges_tokens == (250, 1000)  # 4.1: 0-0.5 s, 0.5-2 s, 2 s up
    assert [DQN_BUCKETS.of(t) for t in (0, 256, 257, 2048, 2049, 10**6)] == [0, 0, 1, 1, 2, 2]
    with pytest.raises(ValueError):
        Buckets.at_rate(0.0)


def data(n=200):
    """Summaries answer short, stories long; prompt lengths overlap, the task tells them apart."""
    out = []
    for i in range(n):
        story = i % 2 == 0
        out.append(Example(f"{'tell a long story about' if story else 'summarise in a line'} topic {i % 17}",
                           "story" if story else "summary", 100 + (i * 7) % 50, 2 if story else 0, f"p{i}"))
    return out


def test_both_predictors_learn_the_task_hint():
    fitted, held = split_by_program(data(), 0.2, seed=0)
    text = TextBucketPredictor().fit(fitted)
    length = LengthBucketPredictor().fit(fitted)
    truth = [e.bucket for e in held]
    assert text.predict([e.prompt for e in held], [e.task for e in held]) == truth
    assert length.predict([e.prompt_tokens for e in held], [e.task for e in held]) == truth


def test_accuracy_per_bucket_and_the_majority_baseline():
    got = accuracy([0, 0, 0, 1], [0, 0, 1, 1], buckets=3)
    assert got["overall"] == 0.75 and got["majority_share"] == 0.75
    assert got["bucket_0"] == pytest.approx(2 / 3) and got["bucket_1"] == 1.0 and got["bucket_1_share"] == 0.25


def test_training_on_a_trace_reports_both_predictors_held_out():
    text, length, metrics = train(generate("chat", 60, 0, models=["qwen2.5-7b-instruct"]), "qwen2.5-7b-instruct",
                                  DQN_BUCKETS)
    assert set(metrics) == {"text_with_task_hint", "forest_on_length_and_application"}
    assert all(0.0 <= m["overall"] <= 1.0 for m in metrics.values())
    with pytest.raises(ValueError, match="qwen2.5-14b"):
        train(generate("chat", 5, 0, models=["qwen2.5-7b-instruct"]), "qwen2.5-14b-instruct", DQN_BUCKETS)
