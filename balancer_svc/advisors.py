"""The balancer's advisory services: the router's confidences q[m] and the predictor's output lengths.

Both are advisory (docs/architecture.md): while one is down, a call is still decided, without the router's
confidences or on the input-length proxy, and its receipt says so. The questions of the calls deciding in
one event-loop turn share one batch (``hetflow.runtime.coalescing``; both services take batches, Chimera 3.8),
sent as a message on one long-lived stream per service (``hetflow.runtime.batch_streams``), or by the unary
method to a service without the stream.
"""

from __future__ import annotations

from typing import Sequence

import grpc

from hetflow import wire
from hetflow.core.call import LlmCall
from hetflow.core.features import feature_row
from hetflow.core.policies.contracts import Prediction
from hetflow.runtime.batch_streams import BatchStream
from hetflow.runtime.coalescing import Coalescer, WrongAnswerCount, rejected
from hetflow.runtime.logs import get_logger
from hetflow.v1 import predictor_pb2, predictor_pb2_grpc, router_pb2, router_pb2_grpc

log = get_logger(__name__)

COALESCED_ITEMS = 64
"""Calls whose router or predictor questions share one RPC, at most (the prompts ride in it)."""


class Advisors:
    """The router and predictor clients (None: not configured), asked per call, batched per loop turn."""

    def __init__(self, router: router_pb2_grpc.RouterStub | None, predictor: predictor_pb2_grpc.PredictorStub | None,
                 quantiles: Sequence[float], timeout_s: float) -> None:
        self.router, self.predictor = router, predictor
        self.quantiles, self.timeout_s = list(quantiles), timeout_s
        self._scores: Coalescer[str, router_pb2.ModelConfidence] = Coalescer(
            self._score_batch, COALESCED_ITEMS, "router.Score", rejected)
        self._predictions: Coalescer[list[predictor_pb2.FeatureRow], list[predictor_pb2.Prediction]] = Coalescer(
            self._predict_batch, COALESCED_ITEMS, "predictor.Predict", rejected)
        self._score_stream: BatchStream[router_pb2.ScoreRequest, router_pb2.ScoreReply] = BatchStream(
            lambda: self.router.ScoreStream(), "router.ScoreStream", timeout_s)  # type: ignore[union-attr]
        self._predict_stream: BatchStream[predictor_pb2.PredictRequest, predictor_pb2.PredictReply] = BatchStream(
            lambda: self.predictor.PredictStream(),  # type: ignore[union-attr]
            "predictor.PredictStream", timeout_s)

    async def close(self) -> None:
        for stream in (self._score_stream, self._predict_stream):
            await stream.close()

    async def score(self, call: LlmCall) -> tuple[dict[str, float], bool]:
        """Router confidences q[m] (Chimera Algorithm 1, lines 4-5) and whether the prompt was cut."""
        if self.router is None:
            return {}, False
        try:
            score = await self._scores.ask(call.user_prompt)
            return dict(score.confidence), score.truncated
        except grpc.aio.AioRpcError as exc:
            log.warning("router_unavailable", code=exc.code().name, details=exc.details())
        except WrongAnswerCount as exc:
            log.warning("router_unmatched_reply", error=str(exc))
        return {}, False

    async def predict(self, call: LlmCall, models: list[str]) -> dict[str, tuple[Prediction, str]]:
        """y-hat = Y-hat(r.meta_info, m) for every candidate m at once; Algorithm 1 line 28 then takes the
        chosen model's. Falls back to the input-length proxy when the predictor is down."""
        if self.predictor is not None:
            try:
                predicted = await self._predictions.ask(
                    [wire.feature_row_to_proto(feature_row(call, m)) for m in models])
                return {m: (wire.prediction_from_proto(p, self.quantiles), "") for m, p in zip(models, predicted)}
            except grpc.aio.AioRpcError as exc:
                log.warning("predictor_unavailable", code=exc.code().name, details=exc.details())
            except WrongAnswerCount as exc:
                log.warning("predictor_unmatched_reply", error=str(exc))
        return {m: (Prediction(float(call.input_tokens)), "predictor-unavailable:input-length") for m in models}

    async def _score_batch(self, prompts: list[str]) -> Sequence[router_pb2.ModelConfidence]:
        assert self.router is not None
        request = router_pb2.ScoreRequest(prompts=prompts)
        reply = await self._score_stream.ask_or(
            request, lambda: self.router.Score(request, timeout=self.timeout_s))  # type: ignore[union-attr]
        return reply.scores

    async def _predict_batch(self, rows_per_call: list[list[predictor_pb2.FeatureRow]]
                             ) -> list[list[predictor_pb2.Prediction]]:
        """One ``Predict`` for the rows of several calls, its predictions split back per call."""
        assert self.predictor is not None
        asked = [row for rows in rows_per_call for row in rows]
        request = predictor_pb2.PredictRequest(rows=asked, quantiles=self.quantiles)
        reply = await self._predict_stream.ask_or(
            request, lambda: self.predictor.Predict(request, timeout=self.timeout_s))  # type: ignore[union-attr]
        predictions, answers, start = list(reply.predictions), [], 0
        if len(predictions) != len(asked):
            raise WrongAnswerCount(f"the predictor answered {len(predictions)} of {len(asked)} rows")
        for rows in rows_per_call:
            answers.append(predictions[start:start + len(rows)])
            start += len(rows)
        return answers

