"""Cascade serving without a server: stages, verdicts, the reply and its receipt (Cascadia 3.3)."""

import contextlib
from dataclasses import replace

import grpc
import pytest

from balancer_svc.cascade import CascadeServing
from balancer_svc.judges import Grade
from hetflow.core.cascade.config import CascadeConfig, JudgeSpec
from hetflow.core.errors import ResourceExhausted, Unavailable
from hetflow.core.workload_window import WorkloadWindow
from hetflow.runtime.interceptors import rpc_error
from hetflow.v1 import balancer_pb2
from tests.factories import call

MODELS = ("small", "medium", "large")


class FakeRelay:
    """Answers each model's stage with its name; ``fail`` names models whose stage fails."""

    def __init__(self, fail: dict[str, Exception] | None = None, abort: frozenset[str] = frozenset()) -> None:
        self.fail, self.abort = fail or {}, abort
        self.served: list[tuple[str, str]] = []
        self.admitted = 0
        self.workload = WorkloadWindow()

    @contextlib.contextmanager
    def admission(self, tenant, accept_wait_s=None):
        self.admitted += 1
        yield

    async def serve(self, call, time_remaining_s):
        async for chunk in self.serve_admitted(call, time_remaining_s):
            yield chunk

    async def serve_admitted(self, call, time_remaining_s):
        self.served.append((call.request_id, call.model_pin))
        if call.model_pin in self.fail:
            raise self.fail[call.model_pin]
        first = balancer_pb2.GenerateChunk(request_id=call.request_id, text=f"{call.model_pin} says",
                                           output_tokens=2, model=call.model_pin, engine_id=f"{call.model_pin}-0")
        if call.want_receipt:
            first.receipt.CopyFrom(balancer_pb2.Receipt(request_id=call.request_id, model=call.model_pin))
        yield first
        yield balancer_pb2.GenerateChunk(request_id=call.request_id, text=" hi", output_tokens=3, finished=True,
                                         finish_reason="abort" if call.model_pin in self.abort else "stop")


class FixedJudge:
    name = "fixed"

    def __init__(self, grades: dict[str, float | None]) -> None:
        self.grades = grades
        self.asked: list[str] = []

    async def grade(self, call, stage, model, answer, answer_tokens, time_remaining_s):
        self.asked.append(model)
        assert answer == f"{model} says hi" and answer_tokens == 3
        score = self.grades[model]
        return Grade(score, 1.5, "" if score is not None else "no rating")


def cascade(grades, fail=None, thresholds=(70.0, 60.0), abort=frozenset()):
    cfg = CascadeConfig(MODELS, thresholds, JudgeSpec(kind="learned", artifact="unused"))
    dispatcher, judge = FakeRelay(fail, abort), FixedJudge(grades)
    return CascadeServing(dispatcher, cfg, judge), dispatcher, judge


async def run(serving, the_call):
    return [c async for c in serving.serve(the_call, None)]


async def test_a_grade_below_the_threshold_escalates_and_one_above_stops_the_cascade():
    serving, dispatcher, judge = cascade({"small": 69.0, "medium": 60.0})
    the_call = replace(call(), want_receipt=True)
    chunks = await run(serving, the_call)
    assert [m for _, m in dispatcher.served] == ["small", "medium"] and judge.asked == ["small", "medium"]
    assert "".join(c.text for c in chunks) == "medium says hi" and chunks[0].model == "medium"
    assert {c.request_id for c in chunks} == {the_call.request_id}
    stages = chunks[0].receipt.cascade
    assert [(s.model, s.outcome) for s in stages] == [("small", "escalated"), ("medium", "accepted")]
    assert stages[0].score == 69.0 and stages[0].threshold == 70.0 and stages[1].threshold == 60.0
    assert stages[0].request_id == f"{the_call.request_id}/c1" and stages[0].judge_ms == 1.5
    assert chunks[0].receipt.request_id == the_call.request_id and dispatcher.admitted == 1
    [sampled] = dispatcher.workload.sample(1.0)  # the re-planner's view: c_1's length and grade
    assert sampled.first_grade == 69.0 and sampled.output_tokens == 3 and sampled.prompt == the_call.prompt


async def test_the_last_model_answers_ungraded_after_every_earlier_stage_fell_short():
    serving, dispatcher, judge = cascade({"small": 10.0, "medium": 59.9})
    chunks = await run(serving, replace(call(), want_receipt=True))
    stages = chunks[0].receipt.cascade
    assert [s.outcome for s in stages] == ["escalated", "escalated", "last-model"]
    assert judge.asked == ["small", "medium"] and not stages[2].HasField("score")
    assert not stages[2].HasField("threshold")


async def test_the_first_models_answer_is_returned_when_it_meets_its_threshold():
    serving, dispatcher, _ = cascade({"small": 70.0})
    chunks = await run(serving, call())
    assert [m for _, m in dispatcher.served] == ["small"] and chunks[0].model == "small"
    assert not any(c.HasField("receipt") for c in chunks)  # not asked for


async def test_an_answer_the_judge_could_not_grade_is_forwarded():
    serving, _, _ = cascade({"small": None, "medium": 90.0})
    chunks = await run(serving, replace(call(), want_receipt=True))
    first = chunks[0].receipt.cascade[0]
    assert first.outcome == "escalated" and "no rating" in first.why and not first.HasField("score")


@pytest.mark.parametrize("failure", [
    ResourceExhausted("queue full"),
    rpc_error(grpc.StatusCode.INVALID_ARGUMENT, "the prompt is longer than the model's context, queue full"),
], ids=["refused by the balancer", "refused by the engine"])
async def test_a_failed_escalation_returns_the_answer_already_given_and_says_why(failure):
    serving, _, _ = cascade({"small": 10.0}, fail={"medium": failure})
    chunks = await run(serving, replace(call(), want_receipt=True))
    assert "".join(c.text for c in chunks) == "small says hi"
    stages = chunks[0].receipt.cascade
    assert [s.outcome for s in stages] == ["escalated", "failed"] and "queue full" in stages[1].why


async def test_a_first_stage_that_fails_fails_the_call():
    serving, _, _ = cascade({}, fail={"small": Unavailable("no engine")})
    with pytest.raises(Unavailable, match="no engine"):
        await run(serving, call())


async def test_a_pinned_call_skips_the_cascade():
    serving, dispatcher, judge = cascade({})
    chunks = await run(serving, replace(call(), model_pin="large"))
    assert dispatcher.served == [(chunks[0].request_id, "large")] and judge.asked == []


@pytest.mark.parametrize("aborted", ["medium", "large"])
async def test_an_escalation_cut_short_returns_the_whole_answer_already_given_ungraded_by_it(aborted):
    """A later stage's stream that ends aborted is neither graded (a truncated answer can pass) nor kept
    over the answer already given, at the last stage as at a middle one."""
    serving, dispatcher, judge = cascade({"small": 10.0, "medium": 10.0}, abort=frozenset({aborted}))
    chunks = await run(serving, replace(call(), want_receipt=True))
    stages = chunks[0].receipt.cascade
    assert stages[-1].model == aborted and stages[-1].outcome == "failed" and "aborted" in stages[-1].why
    assert aborted not in judge.asked and chunks[-1].finish_reason == "stop"
    assert "".join(c.text for c in chunks) == ("small says hi" if aborted == "medium" else "medium says hi")
