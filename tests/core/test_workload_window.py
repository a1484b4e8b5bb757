"""The live workload window (Cascadia 4.4): the arrival rate over the window and a uniform sample."""

import pytest

from hetflow.core.workload_window import WorkloadWindow


def test_the_rate_counts_the_last_window_of_arrivals():
    window = WorkloadWindow(window_s=10.0, sample_size=5)
    for i in range(100):
        window.record(i * 0.5, f"p{i}", 10)  # 2 calls/s for 50 s
    assert window.rate_per_s(49.5) == pytest.approx(2.0, rel=0.06)
    assert window.rate_per_s(49.5 + 20) == 0.0  # nothing in the last 10 s


def test_the_sample_is_bounded_uniform_and_newest_first():
    window = WorkloadWindow(window_s=1000.0, sample_size=50, seed=3)
    for i in range(5000):
        window.record(float(i) * 0.1, f"p{i}", i)
    sample = window.sample(500.0)
    assert len(sample) == 50 and len({c.prompt for c in sample}) == 50
    assert 1500 < sum(c.input_tokens for c in sample) / 50 < 3500  # a uniform draw of 0..4999 averages 2500
    assert [c.received_unix_s for c in sample] == sorted((c.received_unix_s for c in sample), reverse=True)


def test_a_new_window_reports_the_last_complete_one_until_it_fills():
    window = WorkloadWindow(window_s=10.0, sample_size=4)
    for i in range(8):
        window.record(float(i), f"old{i}", 1)
    window.record(10.5, "new", 2)  # the window rolled
    prompts = [c.prompt for c in window.sample(10.6)]
    assert prompts[0] == "new" and len(prompts) == 4 and all(p.startswith("old") for p in prompts[1:])


def test_a_recorded_call_is_filled_in_with_its_answer_and_grade():
    window = WorkloadWindow(sample_size=1)
    call = window.record(0.0, "q", 5)
    call.output_tokens, call.first_grade = 7, 80.0
    assert window.sample(1.0)[0].first_grade == 80.0
