"""protobuf <-> engine domain types."""

from __future__ import annotations

import math
import time

from engine_svc.backends.base import BackendStatus, GenerateCall, ModelServerGrant, OutputDelta
from hetflow import wire
from hetflow.core.engine.profile import EngineProfile
from hetflow.core.errors import InvalidArgument
from hetflow.core.monitor.state import EngineStatus
from hetflow.v1 import common_pb2, engine_pb2


def call_from_proto(msg: engine_pb2.EngineGenerateRequest, max_tokens_limit: int) -> GenerateCall:
    if not msg.request_id:
        raise InvalidArgument("request_id is required")
    messages = tuple((m.role, m.content) for m in msg.messages)
    if not msg.prompt and not messages:
        raise InvalidArgument("prompt or messages must be non-empty")
    if not math.isfinite(msg.retain_kv_s):
        raise InvalidArgument(f"retain_kv_s must be a finite number of seconds, got {msg.retain_kv_s}")
    return GenerateCall(request_id=msg.request_id, prompt=msg.prompt, messages=messages,
                        sampling=wire.sampling_from_proto(msg.sampling, max_tokens_limit),
                        priority=msg.priority, program_id=msg.program_id,
                        priority_tiebreak=msg.priority_tiebreak, retain_kv_s=max(0.0, msg.retain_kv_s),
                        reserve_output_tokens=msg.reserve_output_tokens)


def chunk_to_proto(delta: OutputDelta) -> engine_pb2.EngineChunk:
    return engine_pb2.EngineChunk(
        request_id=delta.request_id, text=delta.text, output_tokens=delta.output_tokens,
        prompt_tokens=delta.prompt_tokens, finished=delta.finished, finish_reason=delta.finish_reason,
        queued_s=delta.queued_s, preemptions=delta.preemptions)


def grant_to_proto(grant: ModelServerGrant) -> engine_pb2.HoldGrant:
    return engine_pb2.HoldGrant(url=grant.url, body_json=grant.body_json, prompt_tokens=grant.prompt_tokens,
                                queued_s=grant.queued_s, request_id=grant.request_id)


def status_to_proto(engine_id: str, model: str, address: str, backend: str, serving: bool,
                    status: BackendStatus, profile: EngineProfile,
                    serving_endpoint: str = "", incarnation: str = "") -> common_pb2.EngineStatus:
    return wire.engine_status_to_proto(
        EngineStatus(engine_id=engine_id, model=model, address=address, backend=backend, serving=serving,
                     waiting=status.waiting, running=status.running, kv_cache_usage=status.kv_cache_usage,
                     preemptions_total=status.preemptions_total, profile=profile,
                     active_request_ids=tuple(status.active_request_ids),
                     pending_prefill_tokens=status.pending_prefill_tokens, serving_endpoint=serving_endpoint,
                     incarnation=incarnation),
        time.time())
