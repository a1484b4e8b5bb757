"""The modelled judge: agreement with the ground truth as configured, the same grade everywhere."""

from hetflow.core.cascade.modelled_judge import judge_grade


def test_the_judge_agrees_with_the_ground_truth_as_often_as_configured_and_grades_the_same_everywhere():
    grades = [judge_grade(True, "call", k) for k in range(2000)]
    assert 0.82 < sum(g >= 60 for g in grades) / len(grades) < 0.88
    assert all(0 <= g <= 100 and not 40 <= g < 60 for g in grades)
    assert judge_grade(False, "call", 7) == judge_grade(False, "call", 7)
    assert sum(judge_grade(False, "call", k, judge_agreement=1.0) for k in range(50)) < 40 * 50
