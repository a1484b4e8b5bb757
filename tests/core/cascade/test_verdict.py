"""Cascadia 3.3, figure 4: accept at or above h_i, forward below it; the last model type is not graded."""

from hetflow.core.cascade.verdict import ACCEPTED, ESCALATED, LAST_MODEL, verdict

H = (70.0, 55.0)


def test_a_grade_at_or_above_the_stage_threshold_is_accepted_and_below_it_forwarded():
    assert verdict(1, 70.0, H).outcome == ACCEPTED
    assert verdict(1, 69.9, H).outcome == ESCALATED
    assert verdict(2, 56.0, H).outcome == ACCEPTED  # stage 2 reads h_2, not h_1
    assert verdict(2, 54.0, H).threshold == 55.0 and verdict(2, 54.0, H).outcome == ESCALATED
    assert "69.9 < h_1 70.0" in verdict(1, 69.9, H).why


def test_the_last_model_type_answers_without_a_threshold():
    last = verdict(3, None, H)
    assert last.outcome == LAST_MODEL and last.threshold is None


def test_an_ungraded_answer_is_forwarded_with_the_judges_reason():
    v = verdict(1, None, H, judge_failure="no rating in the judge's reply 'hello'")
    assert v.outcome == ESCALATED and "no rating" in v.why
