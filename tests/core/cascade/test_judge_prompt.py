"""The LLM judge's prompt carries the question and the answer; its reply parses to a 0-100 grade."""

import pytest

from hetflow.core.cascade.judge_prompt import judge_messages, parse_grade


def test_the_prompt_holds_the_question_and_the_answer_after_the_instructions():
    (role0, system), (role1, user) = judge_messages("What is 2+2?", "4")
    assert (role0, role1) == ("system", "user") and "1" in system and "10" in system
    assert user.index("What is 2+2?") < user.index("4\n")


@pytest.mark.parametrize("reply, grade", [("7", 70.0), (" 10", 100.0), ("1", 10.0), ("8/10", 80.0)])
def test_a_rating_parses_to_ten_times_itself(reply, grade):
    assert parse_grade(reply) == grade


@pytest.mark.parametrize("reply", ["", " hello", "0", "11", "-"])
def test_a_reply_without_a_rating_in_range_is_an_error_quoting_it(reply):
    with pytest.raises(ValueError, match="rating|judge's reply"):
        parse_grade(reply)
