"""The planner's profiled sample: calls as every model answers them, graded by the modelled judge."""

import pytest

from hetflow.planner.sample import sample_from_trace
from hetflow.workloads.generate import generate

MODELS = ["qwen2.5-1.5b-instruct", "qwen2.5-7b-instruct"]


def test_the_sample_grades_the_stronger_model_higher_on_average():
    sample = sample_from_trace(generate("code", 200, 0, models=MODELS), MODELS, 150)
    assert len(sample) == 150
    mean = {m: sum(r.score[m] for r in sample) / len(sample) for m in MODELS}
    assert mean["qwen2.5-7b-instruct"] > mean["qwen2.5-1.5b-instruct"]
    assert all(r.output_tokens[m] > 0 and r.input_tokens[m] > 0 for r in sample for m in MODELS)


def test_a_trace_without_the_cascades_models_is_an_error_naming_them():
    with pytest.raises(ValueError, match="qwen2.5-14b-instruct"):
        sample_from_trace(generate("code", 5, 0, models=MODELS), [*MODELS, "qwen2.5-14b-instruct"], 5)
