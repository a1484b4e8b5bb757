"""The router and predictor are advisory: batched per loop turn, each batch a message on one stream per
service (or the unary method of a service without the stream), and a call is still decided while either
is down or rejects another call's question."""

import asyncio
from types import SimpleNamespace

import grpc
import pytest

from balancer_svc.advisors import Advisors
from hetflow.core.policies.contracts import Prediction
from hetflow.v1 import predictor_pb2, router_pb2
from tests.factories import call, streamed


def _error(code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), "test")


def _router(score, has_stream: bool = True) -> SimpleNamespace:
    return SimpleNamespace(Score=score, ScoreStream=streamed(score, router_pb2.ScoreReply, not has_stream))


def _predictor(predict, has_stream: bool = True) -> SimpleNamespace:
    return SimpleNamespace(Predict=predict,
                           PredictStream=streamed(predict, predictor_pb2.PredictReply, not has_stream))


@pytest.mark.parametrize("has_stream", [True, False])
def test_while_both_are_down_calls_get_no_confidences_and_the_input_length_proxy(has_stream):
    async def down(request, timeout):
        raise _error(grpc.StatusCode.UNAVAILABLE)

    async def scenario():
        advisors = Advisors(_router(down, has_stream), _predictor(down, has_stream), [0.9], 1.0)
        asked = call(prompt="x " * 50)
        return asked, await advisors.score(asked), await advisors.predict(asked, ["small", "large"])

    asked, scored, predicted = asyncio.run(scenario())
    assert scored == ({}, False)
    assert {m: (p.median_tokens, why) for m, (p, why) in predicted.items()} == {
        m: (float(asked.input_tokens), "predictor-unavailable:input-length") for m in ("small", "large")}


def test_answers_that_cannot_be_matched_to_their_calls_are_read_as_the_service_down():
    async def short_scores(request, timeout):
        return router_pb2.ScoreReply(scores=[])

    async def short_predictions(request, timeout):
        return predictor_pb2.PredictReply(predictions=[])

    async def scenario():
        advisors = Advisors(_router(short_scores), _predictor(short_predictions), [0.9], 1.0)
        asked = call(prompt="x " * 50)
        return asked, await advisors.score(asked), await advisors.predict(asked, ["small"])

    asked, scored, predicted = asyncio.run(scenario())
    assert scored == ({}, False)
    assert predicted == {"small": (Prediction(float(asked.input_tokens)), "predictor-unavailable:input-length")}


@pytest.mark.parametrize("has_stream", [True, False])
def test_a_question_the_predictor_rejects_fails_only_its_own_call(has_stream):
    batches = []

    async def predict(request, timeout):
        batches.append([row.user_prompt for row in request.rows])
        if any(row.user_prompt == "bad" for row in request.rows):
            raise _error(grpc.StatusCode.INVALID_ARGUMENT)
        return predictor_pb2.PredictReply(predictions=[predictor_pb2.Prediction(median_tokens=7.0)
                                                       for _ in request.rows])

    async def scenario():
        advisors = Advisors(None, _predictor(predict, has_stream), [0.9], 1.0)
        return await asyncio.gather(*(advisors.predict(call(prompt=p), ["m"]) for p in ("good", "bad", "fine")))

    good, bad, fine = asyncio.run(scenario())
    assert batches[0] == ["good", "bad", "fine"] and sorted(batches[1:]) == [["bad"], ["fine"], ["good"]]
    assert good["m"][0].median_tokens == 7.0 and fine["m"][0].median_tokens == 7.0
    assert bad["m"][1] == "predictor-unavailable:input-length"


@pytest.mark.parametrize("has_stream", [True, False])
def test_without_a_router_nothing_is_asked_and_with_one_each_call_gets_its_own_confidences(has_stream):
    async def score(request, timeout):
        return router_pb2.ScoreReply(scores=[router_pb2.ModelConfidence(confidence={"m": len(p) / 100})
                                             for p in request.prompts])

    async def scenario():
        alone = await Advisors(None, None, [0.9], 1.0).score(call(prompt="x"))
        advisors = Advisors(_router(score, has_stream), None, [0.9], 1.0)
        return alone, await asyncio.gather(*(advisors.score(call(prompt="y" * n)) for n in (10, 20)))

    alone, (ten, twenty) = asyncio.run(scenario())
    assert alone == ({}, False) and ten[0] == {"m": 0.1} and twenty[0] == {"m": 0.2}
