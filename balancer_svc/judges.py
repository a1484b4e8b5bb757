"""The cascade's judges behind one interface (Cascadia 3.3: "a judge then evaluates the quality of the
output responses"): ``grade`` an answer of a model to a call, 0-100, or say why it could not.

- ``LlmJudge``: LLM-as-a-judge (Cascadia 4.1) on a model of the stack. The scoring prompt goes through
  the balancer's own decision path pinned to the judge's model, so the monitor counts it and engines
  order it like any call; 1-2 output tokens (Cascadia footnote 4); its time is part of the call's.
- ``LearnedJudge``: the scorer trained on traces (Cascadia appendix N), run in the balancer's process.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import AsyncIterator, Protocol

import grpc

from hetflow.core.call import LlmCall, SamplingSpec
from hetflow.core.cascade.config import JudgeSpec
from hetflow.core.cascade.judge_prompt import judge_messages, parse_grade
from hetflow.core.cascade.learned_scorer import LearnedScorer
from hetflow.core.errors import HetflowError
from hetflow.core.prefix import text_block_hashes
from hetflow.v1 import balancer_pb2

JUDGE_AGENT = "cascade-judge"
"""The agent name a judge's call carries in its program (the monitor's and the receipts' view)."""


@dataclass(frozen=True)
class Grade:
    score: float | None
    """0-100; None when the judge gave none (``failure`` says why)."""
    elapsed_ms: float
    failure: str = ""


class Judge(Protocol):
    name: str

    async def grade(self, call: LlmCall, stage: int, model: str, answer: str, answer_tokens: int,
                    time_remaining_s: float | None) -> Grade:
        """Grade ``model``'s ``answer`` to ``call`` at cascade stage ``stage`` (1-based)."""
        ...


class Serve(Protocol):
    """The dispatcher's ``serve_admitted``: decide and stream a call already admitted."""

    def __call__(self, call: LlmCall, time_remaining_s: float | None, /
                 ) -> AsyncIterator[balancer_pb2.GenerateChunk]: ...


class LlmJudge:
    def __init__(self, spec: JudgeSpec, serve: Serve) -> None:
        self.spec, self._serve = spec, serve
        self.name = spec.name

    def judge_call(self, call: LlmCall, stage: int, answer: str) -> LlmCall:
        """The scoring prompt as a call of the same program, pinned to the judge's model, greedy."""
        messages = judge_messages(call.full_input, answer)
        return LlmCall(request_id=f"{call.request_id}/judge{stage}", prompt="", messages=messages,
                       sampling=SamplingSpec(max_tokens=self.spec.max_tokens, temperature=0.0),
                       workflow=replace(call.workflow, agent=JUDGE_AGENT, upstream_agent=call.workflow.agent),
                       model_pin=self.spec.model, received_unix_s=time.time(),
                       prefix_blocks=text_block_hashes("\n".join(c for _, c in messages)))

    async def grade(self, call: LlmCall, stage: int, model: str, answer: str, answer_tokens: int,
                    time_remaining_s: float | None) -> Grade:
        started = time.perf_counter()
        try:
            reply = "".join([c.text async for c in self._serve(self.judge_call(call, stage, answer), time_remaining_s)])
        except HetflowError as exc:
            return Grade(None, _ms_since(started), f"judge call failed: {type(exc).__name__}: {exc}")
        except grpc.aio.AioRpcError as exc:  # e.g. the judge's engine refused the prompt (INVALID_ARGUMENT)
            return Grade(None, _ms_since(started), f"judge call failed: {exc.code().name}: {exc.details()}")
        try:
            return Grade(parse_grade(reply), _ms_since(started))
        except ValueError as exc:
            return Grade(None, _ms_since(started), str(exc))


class LearnedJudge:
    def __init__(self, scorer: LearnedScorer) -> None:
        self.scorer = scorer
        self.name = "learned"

    async def grade(self, call: LlmCall, stage: int, model: str, answer: str, answer_tokens: int,
                    time_remaining_s: float | None) -> Grade:
        started = time.perf_counter()
        return Grade(self.scorer.grade(call.user_prompt, model, answer_tokens), _ms_since(started))


def _ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1e3
