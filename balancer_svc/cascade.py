"""Cascade serving (Cascadia 3.3, figure 4) on the balancer's request path.

A call without a model pin goes to c_1, the smallest model type; the judge grades the answer; at or above
h_i it is the reply, below it the call is forwarded to c_{i+1}, and c_C's answer is returned ungraded.
Each stage is a call of its own (``<request_id>/c<i>``) through the balancer's whole decision path
pinned to the stage's model, so engine choice, priority, the monitor's accounting and re-dispatch on
engine failure apply to it. As in Cascadia, the forwarded call is the original request: the rejected
answer is dropped, not shown to the larger model. The client's reply is the accepted stage's, streamed
once it is accepted (a cascade cannot stream an answer the judge may still reject); its receipt lists
every stage with its grade, threshold and why the cascade stopped. If a later stage fails (no engine,
refused, deadline), the best answer so far is returned and the receipt says so: nothing already
answered is lost. The client and the gateway send the same request as without a cascade.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import AsyncIterator

import grpc

from balancer_svc.judges import Judge
from balancer_svc.relay import Relay
from hetflow.core.call import LlmCall
from hetflow.core.cascade.config import CascadeConfig
from hetflow.core.cascade.verdict import ESCALATED, Verdict, verdict
from hetflow.core.errors import HetflowError
from hetflow.runtime.logs import get_logger
from hetflow.v1 import balancer_pb2

log = get_logger(__name__)
FAILED = "failed"
"""A stage's outcome when its call failed; the answer of the stage before it is returned."""


class CascadeServing:
    def __init__(self, relay: Relay, cfg: CascadeConfig, judge: Judge) -> None:
        self.relay, self.cfg, self.judge = relay, cfg, judge

    async def serve(self, call: LlmCall, time_remaining_s: float | None) -> AsyncIterator[balancer_pb2.GenerateChunk]:
        """A pinned call skips the cascade; any other goes through it, admitted once for all its stages
        and judge calls."""
        if call.model_pin:
            async for chunk in self.relay.serve(call, time_remaining_s):
                yield chunk
            return
        deadline_s = time.monotonic() + time_remaining_s if time_remaining_s is not None else None
        with self.relay.admission(call.workflow.tenant, accept_wait_s=call.accept_wait_s):
            sampled = self.relay.workload.record(call.received_unix_s, call.full_input, call.input_tokens,
                                                      call.workflow.workflow)
            answer, stages = await self._run(call, deadline_s)
        first = stages[0]
        sampled.output_tokens = first.output_tokens
        sampled.first_grade = first.score if first.HasField("score") else None
        for chunk in self._reply(call, answer, stages):
            yield chunk

    async def _run(self, call: LlmCall, deadline_s: float | None
                   ) -> tuple[list[balancer_pb2.GenerateChunk], list[balancer_pb2.CascadeStage]]:
        """Stages until one is accepted or the last model answers; the kept answer's chunks and the
        stages' records."""
        kept: list[balancer_pb2.GenerateChunk] = []
        stages: list[balancer_pb2.CascadeStage] = []
        for stage, model in enumerate(self.cfg.models, 1):
            stage_call = replace(call, request_id=f"{call.request_id}/c{stage}", model_pin=model, want_receipt=True)
            started = time.perf_counter()
            try:
                chunks = [c async for c in self.relay.serve_admitted(stage_call, _remaining(deadline_s))]
            except (HetflowError, grpc.aio.AioRpcError) as exc:  # the engine's own refusal (a prompt too long
                # for the larger model) is relayed as it came
                if not kept:
                    raise
                stages.append(balancer_pb2.CascadeStage(
                    model=model, request_id=stage_call.request_id, outcome=FAILED, judge=self.judge.name,
                    why=f"{type(exc).__name__}: {exc}; c_{stage - 1}'s answer returned"))
                log.warning("cascade_stage_failed", stage=stage, model=model, error=str(exc))
                break
            record = _stage_record(stage_call, model, chunks, (time.perf_counter() - started) * 1e3)
            if kept and _aborted(chunks):  # an answer cut short: not graded, nor kept over a whole one
                record.outcome, record.why = FAILED, f"aborted; c_{stage - 1}'s answer returned"
                stages.append(record)
                log.warning("cascade_stage_aborted", stage=stage, model=model)
                break
            outcome = await self._judge(call, stage, model, chunks, record, deadline_s)
            stages.append(record)
            kept = chunks
            if outcome.outcome != ESCALATED:
                break
        return kept, stages

    async def _judge(self, call: LlmCall, stage: int, model: str, chunks: list[balancer_pb2.GenerateChunk],
                     record: balancer_pb2.CascadeStage, deadline_s: float | None) -> Verdict:
        """Grade the stage's answer (not the last model's) and record the verdict in ``record``."""
        if stage > len(self.cfg.thresholds):
            outcome = verdict(stage, None, self.cfg.thresholds)
        else:
            answer = "".join(c.text for c in chunks)
            grade = await self.judge.grade(call, stage, model, answer, record.output_tokens, _remaining(deadline_s))
            outcome = verdict(stage, grade.score, self.cfg.thresholds, grade.failure)
            record.judge, record.judge_ms = self.judge.name, grade.elapsed_ms
            if grade.score is not None:
                record.score = grade.score
        record.outcome, record.why = outcome.outcome, outcome.why
        if outcome.threshold is not None:
            record.threshold = outcome.threshold
        return outcome

    @staticmethod
    def _reply(call: LlmCall, chunks: list[balancer_pb2.GenerateChunk], stages: list[balancer_pb2.CascadeStage]
               ) -> list[balancer_pb2.GenerateChunk]:
        """The kept stage's chunks as the client's call: its request id, and the receipt (when asked)
        with every stage."""
        out = []
        for i, chunk in enumerate(chunks):
            reply = balancer_pb2.GenerateChunk()
            reply.CopyFrom(chunk)
            reply.request_id = call.request_id
            if i == 0 and call.want_receipt:
                reply.receipt.request_id = call.request_id
                reply.receipt.cascade.extend(stages)
            elif reply.HasField("receipt"):
                reply.ClearField("receipt")
            out.append(reply)
        return out


def _stage_record(stage_call: LlmCall, model: str, chunks: list[balancer_pb2.GenerateChunk],
                  stage_ms: float) -> balancer_pb2.CascadeStage:
    engine_id = next((c.engine_id for c in chunks if c.engine_id), "")
    return balancer_pb2.CascadeStage(model=model, engine_id=engine_id, request_id=stage_call.request_id,
                                     stage_ms=stage_ms, output_tokens=chunks[-1].output_tokens if chunks else 0)


def _remaining(deadline_s: float | None) -> float | None:
    return max(0.0, deadline_s - time.monotonic()) if deadline_s is not None else None


def _aborted(chunks: list[balancer_pb2.GenerateChunk]) -> bool:
    """The stage's stream ended cut short (finish reason "abort", or no finished chunk)."""
    return not chunks or not chunks[-1].finished or chunks[-1].finish_reason == "abort"
