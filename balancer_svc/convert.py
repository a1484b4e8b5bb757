"""protobuf <-> balancer domain types, with the validation of client input."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Callable, Sequence

from hetflow import wire
from hetflow.core import identity
from hetflow.core.call import LlmCall, WorkflowInfo, check_stages
from hetflow.core.cascade.config import CascadeConfig
from hetflow.core.errors import DeadlineExceeded, InvalidArgument, Unavailable
from hetflow.core.pipeline import Decision
from hetflow.core.policies.contracts import Choice, Priority
from hetflow.core.prefix import text_block_hashes
from hetflow.core.workload_window import SampledCall
from hetflow.runtime.security import Caller, PermissionDenied
from hetflow.v1 import balancer_pb2, common_pb2, engine_pb2, monitor_pb2


def call_from_proto(msg: balancer_pb2.GenerateRequest, max_tokens_limit: int, now_unix_s: float,
                    past_deadline: str = "reject", accept_wait_s: float | None = None,
                    count_prompt: Callable[[str, tuple[tuple[str, str], ...]], int] | None = None) -> LlmCall:
    """The validated call. A deadline already past is DEADLINE_EXCEEDED, or with ``past_deadline``
    "best-effort", dropped from the call (served without one) and noted in the receipt.
    ``accept_wait_s``: how long it waited to be taken (``hetflow.runtime.accept_wait``).
    ``count_prompt``: its prompt tokens as its servers count them (``PromptCounter``); None: approximate."""
    messages = tuple((m.role, m.content) for m in msg.messages)
    for i, (role, _) in enumerate(messages):
        if role not in ("system", "user", "assistant"):
            raise InvalidArgument(f"messages[{i}].role must be system, user or assistant, got {role!r}")
    if msg.prompt and messages:
        raise InvalidArgument("set either prompt or messages, not both")
    if not msg.prompt and not messages:
        # A chat's messages may each be empty, as vLLM serves them: its chat template renders them.
        raise InvalidArgument("prompt (or messages) must not be empty")
    if not msg.HasField("sampling"):
        raise InvalidArgument("sampling.max_tokens is required")
    wf = msg.workflow
    missed = bool(wf.deadline_unix_s) and wf.deadline_unix_s <= now_unix_s
    if missed and past_deadline != "best-effort":
        raise DeadlineExceeded(f"workflow.deadline_unix_s {wf.deadline_unix_s:.3f} is already past "
                               f"(now {now_unix_s:.3f})")
    check_stages(wf.stage_index, wf.stage_count, both_set=wf.HasField("stage_index") and wf.HasField("stage_count"))
    return LlmCall(
        request_id=msg.request_id or uuid.uuid4().hex,
        prompt=msg.prompt, messages=messages,
        sampling=wire.sampling_from_proto(msg.sampling, max_tokens_limit),
        workflow=WorkflowInfo(
            program_id=wf.program_id, workflow=wf.workflow, agent=wf.agent,
            stage_index=wf.stage_index if wf.HasField("stage_index") else 0,
            stage_count=wf.stage_count if wf.HasField("stage_count") else 0,
            upstream_agent=wf.upstream_agent, tenant=wf.tenant,
            deadline_unix_s=0.0 if missed else wf.deadline_unix_s, deadline_missed=missed,
            identity_source=wf.identity_source),
        model_pin=msg.model_pin, want_receipt=msg.want_receipt, received_unix_s=now_unix_s,
        prefix_blocks=text_block_hashes(msg.prompt or "\n".join(m.content for m in msg.messages)),
        accept_wait_s=accept_wait_s,
        known_input_tokens=count_prompt(msg.prompt, messages) if count_prompt is not None else None)


AGENTIC_CONTEXT_KEY, AGENT_HINT_KEY = "agentic-context", "agent-hint"
"""The gRPC metadata keys of vLLM's ``agentic_context`` and ``agent_hint``, each a JSON object as text."""


def identified(msg: balancer_pb2.GenerateRequest, metadata: Sequence[tuple[str, str | bytes]],
               now_unix_s: float) -> balancer_pb2.GenerateRequest:
    """The call with its identity: its own workflow fields when they name any of it, else the first
    convention its metadata carries (``hetflow.core.identity``: ``agentic-context``, ``agent-hint``, then
    one header schema), its agent named by its instructions when the convention names none. A call with
    neither is returned as it came."""
    wf = msg.workflow
    if wf.program_id or wf.agent or wf.upstream_agent or wf.HasField("stage_index") or wf.HasField("stage_count"):
        if not wf.identity_source:
            msg.workflow.identity_source = "hetflow"
        return msg
    values: dict[str, list[str]] = {}
    for key, value in metadata:
        if isinstance(value, str):
            values.setdefault(key, []).append(value)
    found = identity.resolve(identity.Conventions(
        agentic_context=_one_json(values, AGENTIC_CONTEXT_KEY), agent_hint=_one_json(values, AGENT_HINT_KEY),
        headers={h: values.get(h, []) for h in identity.IDENTITY_HEADERS}), now_unix_s)
    if found is None:
        return msg
    wf.program_id, wf.upstream_agent, wf.identity_source = found.program_id, found.upstream_agent, found.source
    wf.agent = found.agent or identity.agent_of_instructions(
        next((m.content for m in msg.messages if m.role == "system"), ""))
    if found.deadline_unix_s and not wf.deadline_unix_s:
        wf.deadline_unix_s = found.deadline_unix_s
    return msg


def _one_json(values: dict[str, list[str]], key: str) -> str | None:
    sent = set(values.get(key, []))
    if len(sent) > 1:
        raise identity.IdentityError(f"the {key} metadata is given twice with different values", key)
    return sent.pop() if sent else None


def scoped_to_caller(call: LlmCall, caller: Caller) -> LlmCall:
    """A tenant's call as its own (issue 14): its tenant is the one its API key names (a request naming
    another is refused), and its request and program ids are prefixed with that tenant, so no tenant
    joins, reads or collides with another's program or request."""
    if caller.kind != "tenant":
        return call
    wf = call.workflow
    if wf.tenant and wf.tenant != caller.name:
        raise PermissionDenied(f"workflow.tenant {wf.tenant!r} is not the tenant of the API key ({caller.name!r})")
    program_id = f"{caller.name}/{wf.program_id}" if wf.program_id else ""
    return replace(call, request_id=f"{caller.name}/{call.request_id}",
                   workflow=replace(wf, tenant=caller.name, program_id=program_id))


def engine_request(call: LlmCall, priority: Priority, retain_kv_s: float = 0.0,
                   reserve_output_tokens: int = 0) -> engine_pb2.EngineGenerateRequest:
    return engine_pb2.EngineGenerateRequest(
        request_id=call.request_id, prompt=call.prompt, sampling=wire.sampling_to_proto(call.sampling),
        priority=priority.key, priority_tiebreak=priority.tiebreak, program_id=call.workflow.program_id,
        retain_kv_s=retain_kv_s, reserve_output_tokens=reserve_output_tokens,
        messages=[common_pb2.ChatMessage(role=r, content=c) for r, c in call.messages])


def admit_request(call: LlmCall, decision: Decision) -> monitor_pb2.AdmitRequest:
    """The monitor's entry for a decided call (Chimera Algorithm 1, lines 23 and 32), with HexGen-Flow's
    cost and Kairos's memory plan; admitted only while the room its decision assumed is still there (a
    planned call's ``within_kv``, a gated new program's ``within_working_set``: ``hetflow.core.room``)."""
    plan = decision.memory_plan
    return monitor_pb2.AdmitRequest(
        request_id=call.request_id, program_id=call.workflow.program_id, model=decision.model,
        engine_id=decision.engine_id, predicted_tokens=decision.prediction.median_tokens,
        workflow=wire.workflow_to_proto(call.workflow), prompt_tokens=call.input_tokens,
        predicted_cost_s=decision.predicted_cost_s,
        decode_tokens_per_s=plan.decode_tokens_per_s if plan else 0.0,
        expected_s=plan.expected_s if plan else 0.0, mean_cost_s=decision.mean_cost_s,
        prefix_blocks=call.prefix_blocks, retain_kv_s=decision.retain_kv_s,
        stages_inferred=call.workflow.stages_inferred, within_kv=plan is not None,
        within_working_set=monitor_pb2.WorkingSetRoom(
            need_tokens=room.need_tokens, limit_tokens=room.limit_tokens, growth_share=room.growth_share)
        if (room := decision.working_set_room) is not None else None)


def dispatch_decision(request: engine_pb2.EngineGenerateRequest, model: str, engine_id: str, address: str,
                      receipt: balancer_pb2.Receipt | None) -> balancer_pb2.DispatchDecision:
    reply = balancer_pb2.DispatchDecision(
        request_id=request.request_id, model=model, engine_id=engine_id, engine_address=address,
        engine_request=request, ticket_expires_unix_s=engine_pb2.TicketClaims.FromString(
            request.ticket.claims).expires_unix_s)
    if receipt is not None:
        reply.receipt.CopyFrom(receipt)
    return reply


def completion_reply(request_id: str, chunks: list[balancer_pb2.GenerateChunk]) -> balancer_pb2.CompletionReply:
    """A whole call's chunks as one reply: where it ran and its receipt from the first, usage from the last."""
    if not chunks:
        raise Unavailable("the engine ended the call without a reply")
    first, last = chunks[0], chunks[-1]
    reply = balancer_pb2.CompletionReply(
        request_id=request_id, text="".join(c.text for c in chunks), finish_reason=last.finish_reason,
        usage=last.usage if last.HasField("usage") else common_pb2.Usage(output_tokens=last.output_tokens),
        model=first.model, engine_id=first.engine_id, queued_s=last.queued_s)
    if first.HasField("receipt"):
        reply.receipt.CopyFrom(first.receipt)
    return reply


def stage_to_proto(stage: str, plugin: str, choice: Choice, elapsed_ms: float) -> balancer_pb2.StageDecision:
    return balancer_pb2.StageDecision(stage=stage, plugin=plugin, rule=choice.rule, chosen=choice.chosen,
                                      scores=dict(choice.scores), loads=dict(choice.loads),
                                      params=dict(choice.params), elapsed_ms=elapsed_ms,
                                      scorers={name: balancer_pb2.EngineScores(per_engine=dict(values))
                                               for name, values in choice.scorers.items()})


def workload_reply(window_s: float, rate_per_s: float, sample: list[SampledCall],
                   cascade: CascadeConfig | None = None) -> balancer_pb2.WorkloadReply:
    reply = balancer_pb2.WorkloadReply(window_s=window_s, rate_per_s=rate_per_s)
    if cascade is not None:
        reply.cascade_models.extend(cascade.models)
        reply.cascade_thresholds.extend(cascade.thresholds)
    for c in sample:
        msg = reply.samples.add(received_unix_s=c.received_unix_s, prompt=c.prompt, input_tokens=c.input_tokens,
                                output_tokens=c.output_tokens)
        if c.first_grade is not None:
            msg.first_grade = c.first_grade
    return reply
