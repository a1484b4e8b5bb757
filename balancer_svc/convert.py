"""protobuf <-> balancer domain types, with the validation of client input."""

from __future__ import annotations

import uuid
from typing import Iterable

from hetflow.core.call import LlmCall, WorkflowInfo
from hetflow.core.policies import Choice, Prediction
from hetflow.core.snapshot import ClusterSnapshot, EngineView
from engine_svc.convert import profile_from_proto, sampling_from_proto
from hetflow.core.errors import DeadlineExceeded, InvalidArgument
from hetflow.core.tokens import count_tokens
from hetflow.v1 import balancer_pb2, common_pb2, engine_pb2, monitor_pb2, predictor_pb2


def call_from_proto(msg: balancer_pb2.GenerateRequest, max_tokens_limit: int, now_unix_s: float,
                    past_deadline: str = "reject") -> LlmCall:
    """The validated call. A deadline already past is DEADLINE_EXCEEDED, or with ``past_deadline``
    "best-effort", dropped from the call (served without one) and noted in the receipt."""
    messages = tuple((m.role, m.content) for m in msg.messages)
    for i, (role, _) in enumerate(messages):
        if role not in ("system", "user", "assistant"):
            raise InvalidArgument(f"messages[{i}].role must be system, user or assistant, got {role!r}")
    if msg.prompt and messages:
        raise InvalidArgument("set either prompt or messages, not both")
    if not msg.prompt.strip() and not any(c.strip() for _, c in messages):
        raise InvalidArgument("prompt (or messages) must not be empty")
    if not msg.HasField("sampling"):
        raise InvalidArgument("sampling.max_tokens is required")
    wf = msg.workflow
    missed = bool(wf.deadline_unix_s) and wf.deadline_unix_s <= now_unix_s
    if missed and past_deadline != "best-effort":
        raise DeadlineExceeded(f"workflow.deadline_unix_s {wf.deadline_unix_s:.3f} is already past "
                               f"(now {now_unix_s:.3f})")
    if wf.HasField("stage_index") and wf.HasField("stage_count") and not 1 <= wf.stage_index <= wf.stage_count:
        raise InvalidArgument(f"workflow.stage_index must be in 1..stage_count ({wf.stage_count}), got {wf.stage_index}")
    return LlmCall(
        request_id=msg.request_id or uuid.uuid4().hex,
        prompt=msg.prompt, messages=messages,
        sampling=sampling_from_proto(msg.sampling, max_tokens_limit),
        workflow=WorkflowInfo(
            program_id=wf.program_id, workflow=wf.workflow, agent=wf.agent,
            stage_index=wf.stage_index if wf.HasField("stage_index") else 0,
            stage_count=wf.stage_count if wf.HasField("stage_count") else 0,
            upstream_agent=wf.upstream_agent, tenant=wf.tenant,
            deadline_unix_s=0.0 if missed else wf.deadline_unix_s, deadline_missed=missed),
        model_pin=msg.model_pin, want_receipt=msg.want_receipt, received_unix_s=now_unix_s)


def snapshot_from_proto(msg: monitor_pb2.MonitorSnapshot) -> ClusterSnapshot:
    return ClusterSnapshot(
        taken_unix_s=msg.taken_unix_s, program_model=msg.program_model, program_start_s=msg.program_start_unix_s,
        agent_priority=msg.agent_priority if msg.HasField("agent_priority") else None,
        agent_expected_s=msg.agent_expected_s if msg.HasField("agent_expected_s") else None,
        engines=tuple(EngineView(
            engine_id=e.status.engine_id, model=e.status.model, address=e.status.address, healthy=e.healthy,
            in_flight_tokens=e.in_flight_tokens, in_flight_requests=e.in_flight_requests,
            waiting=e.status.waiting, running=e.status.running, kv_cache_usage=e.status.kv_cache_usage,
            decode_ms_per_token=e.status.profile.decode_ms_per_token,
            max_batch_size=max(1, e.status.profile.max_batch_size),
            kv_capacity_tokens=e.status.profile.kv_capacity_tokens, in_flight_cost_s=e.in_flight_cost_s,
            profile=profile_from_proto(e.status.profile) if e.status.HasField("profile") else None,
            kv_ledger_tokens=tuple(e.kv_ledger_tokens), suspended=e.suspended)
        for e in msg.engines))


def feature_row(call: LlmCall, model: str) -> predictor_pb2.FeatureRow:
    """Chimera 3.4 features of the call."""
    wf = call.workflow
    return predictor_pb2.FeatureRow(
        model=model, workflow=wf.workflow, agent=wf.agent, stage_index=wf.stage_index, stage_count=wf.stage_count,
        system_prompt_tokens=count_tokens(call.system_prompt), user_prompt_tokens=count_tokens(call.user_prompt),
        input_tokens=call.input_tokens, user_prompt=call.user_prompt)


def prediction_from_proto(msg: predictor_pb2.Prediction, quantiles: Iterable[float]) -> Prediction:
    return Prediction(msg.median_tokens, dict(zip(quantiles, msg.quantile_tokens)))


def workflow_to_proto(wf: WorkflowInfo) -> common_pb2.WorkflowMeta:
    msg = common_pb2.WorkflowMeta(program_id=wf.program_id, workflow=wf.workflow, agent=wf.agent,
                                  upstream_agent=wf.upstream_agent, tenant=wf.tenant,
                                  deadline_unix_s=wf.deadline_unix_s)
    if wf.stage_index:
        msg.stage_index = wf.stage_index
    if wf.stage_count:
        msg.stage_count = wf.stage_count
    return msg


def engine_request(call: LlmCall, priority: float) -> engine_pb2.EngineGenerateRequest:
    s = call.sampling
    sampling = common_pb2.SamplingParams(max_tokens=s.max_tokens, ignore_eos=s.ignore_eos, stop=list(s.stop))
    for name in ("temperature", "top_p", "seed"):
        if getattr(s, name) is not None:
            setattr(sampling, name, getattr(s, name))
    return engine_pb2.EngineGenerateRequest(
        request_id=call.request_id, prompt=call.prompt, sampling=sampling, priority=priority,
        program_id=call.workflow.program_id,
        messages=[common_pb2.ChatMessage(role=r, content=c) for r, c in call.messages])


def stage_to_proto(stage: str, plugin: str, choice: Choice, elapsed_ms: float) -> balancer_pb2.StageDecision:
    return balancer_pb2.StageDecision(stage=stage, plugin=plugin, rule=choice.rule, chosen=choice.chosen,
                                      scores=dict(choice.scores), loads=dict(choice.loads),
                                      params=dict(choice.params), elapsed_ms=elapsed_ms)
