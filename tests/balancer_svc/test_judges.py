"""The LLM judge's call and its reply; the learned judge reads the question, the model and the length."""

from dataclasses import replace

from balancer_svc.judges import JUDGE_AGENT, LearnedJudge, LlmJudge
from hetflow.core.cascade.config import JudgeSpec
from hetflow.core.cascade.learned_scorer import GradedAnswer, fit
from hetflow.core.errors import Unavailable
from hetflow.v1 import balancer_pb2
from tests.factories import call

SPEC = JudgeSpec(kind="llm", model="judge-model", max_tokens=2)


def replying(text: str | None):
    sent = []

    async def serve(judge_call, time_remaining_s):
        sent.append(judge_call)
        if text is None:
            raise Unavailable("no engine of judge-model")
        yield balancer_pb2.GenerateChunk(text=text, output_tokens=1, finished=True)
    return serve, sent


async def test_the_judge_call_is_a_short_greedy_call_of_the_program_pinned_to_the_judge_model():
    serve, sent = replying("8")
    the_call = call("Sort a list.", agent="coder")
    grade = await LlmJudge(SPEC, serve).grade(the_call, 1, "small", "sorted(xs)", 4, None)
    assert grade.score == 80.0 and grade.failure == "" and grade.elapsed_ms >= 0
    [judge_call] = sent
    assert judge_call.model_pin == "judge-model" and judge_call.sampling.max_tokens == 2
    assert judge_call.sampling.temperature == 0.0 and judge_call.request_id == f"{the_call.request_id}/judge1"
    assert judge_call.workflow.program_id == the_call.workflow.program_id
    assert judge_call.workflow.agent == JUDGE_AGENT and judge_call.workflow.upstream_agent == "coder"
    assert "Sort a list." in judge_call.messages[1][1] and "sorted(xs)" in judge_call.messages[1][1]


async def test_an_unparsable_reply_or_a_failed_judge_call_gives_no_grade_and_says_why():
    serve, _ = replying(" lorem ipsum")
    grade = await LlmJudge(SPEC, serve).grade(call(), 1, "small", "x", 1, None)
    assert grade.score is None and "no rating" in grade.failure
    serve, _ = replying(None)
    grade = await LlmJudge(SPEC, serve).grade(call(), 2, "small", "x", 1, None)
    assert grade.score is None and "no engine of judge-model" in grade.failure


async def test_the_learned_judge_grades_the_calls_user_prompt_for_the_answering_model():
    answers = [GradedAnswer(f"hard {i}" if i % 2 else f"easy {i}", "small", 10, 5.0 if i % 2 else 95.0, i % 2 == 0,
                            f"p{i}") for i in range(40)]
    judge = LearnedJudge(fit(answers, ["small"]))
    hard = await judge.grade(replace(call("hard 99")), 1, "small", "x", 10, None)
    easy = await judge.grade(replace(call("easy 98")), 1, "small", "x", 10, None)
    assert hard.score is not None and easy.score is not None and hard.score < easy.score
