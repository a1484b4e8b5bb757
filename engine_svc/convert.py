"""protobuf <-> engine domain types."""

from __future__ import annotations

import time

from engine_svc.backends.base import BackendStatus, GenerateCall, OutputDelta
from hetflow.core.call import SamplingSpec
from hetflow.core.engine.profile import EngineProfile
from hetflow.core.errors import InvalidArgument
from hetflow.v1 import common_pb2, engine_pb2


def sampling_from_proto(msg: common_pb2.SamplingParams, max_tokens_limit: int) -> SamplingSpec:
    if msg.max_tokens < 1 or msg.max_tokens > max_tokens_limit:
        raise InvalidArgument(f"sampling.max_tokens must be in 1..{max_tokens_limit}, got {msg.max_tokens}")
    return SamplingSpec(
        max_tokens=msg.max_tokens,
        temperature=msg.temperature if msg.HasField("temperature") else None,
        top_p=msg.top_p if msg.HasField("top_p") else None,
        seed=msg.seed if msg.HasField("seed") else None,
        ignore_eos=msg.ignore_eos,
        stop=tuple(msg.stop),
    )


def call_from_proto(msg: engine_pb2.EngineGenerateRequest, max_tokens_limit: int) -> GenerateCall:
    if not msg.request_id:
        raise InvalidArgument("request_id is required")
    messages = tuple((m.role, m.content) for m in msg.messages)
    if not msg.prompt and not any(content for _, content in messages):
        raise InvalidArgument("prompt or messages must be non-empty")
    return GenerateCall(request_id=msg.request_id, prompt=msg.prompt, messages=messages,
                        sampling=sampling_from_proto(msg.sampling, max_tokens_limit),
                        priority=msg.priority, program_id=msg.program_id)


def chunk_to_proto(delta: OutputDelta) -> engine_pb2.EngineChunk:
    return engine_pb2.EngineChunk(
        request_id=delta.request_id, text=delta.text, output_tokens=delta.output_tokens,
        prompt_tokens=delta.prompt_tokens, finished=delta.finished, finish_reason=delta.finish_reason,
        queued_s=delta.queued_s, preemptions=delta.preemptions)


def profile_to_proto(p: EngineProfile) -> common_pb2.TimingProfile:
    return common_pb2.TimingProfile(
        name=p.name, model=p.model, gpu=p.gpu, prefill_ms_per_token=p.prefill_ms_per_token,
        decode_base_ms=p.decode_base_ms, decode_ms_per_batch_token=p.decode_ms_per_batch_token,
        decode_ms_per_token=p.decode_ms_per_token, max_batch_size=p.max_num_seqs,
        kv_capacity_tokens=p.kv_capacity_tokens, block_size=p.block_size, decode_ms_per_seq=p.decode_ms_per_seq,
        max_num_batched_tokens=p.max_num_batched_tokens, max_model_len=p.max_model_len)


def profile_from_proto(msg: common_pb2.TimingProfile) -> EngineProfile:
    """The engine's profile as it reported it; the balancer's cost estimates (HexGen-Flow eq. 2) read it."""
    return EngineProfile(
        name=msg.name, model=msg.model, gpu=msg.gpu, prefill_ms_per_token=msg.prefill_ms_per_token,
        decode_base_ms=msg.decode_base_ms, decode_ms_per_seq=msg.decode_ms_per_seq,
        decode_ms_per_batch_token=msg.decode_ms_per_batch_token, kv_capacity_tokens=msg.kv_capacity_tokens,
        block_size=msg.block_size or 16, max_num_seqs=max(1, msg.max_batch_size),
        max_num_batched_tokens=msg.max_num_batched_tokens or 8192, max_model_len=msg.max_model_len or 32768)


def status_to_proto(engine_id: str, model: str, address: str, backend: str, serving: bool,
                    status: BackendStatus, profile: EngineProfile) -> common_pb2.EngineStatus:
    return common_pb2.EngineStatus(
        engine_id=engine_id, model=model, address=address, backend=backend, serving=serving,
        waiting=status.waiting, running=status.running, kv_cache_usage=status.kv_cache_usage,
        preemptions_total=status.preemptions_total, profile=profile_to_proto(profile),
        active_request_ids=status.active_request_ids, reported_unix_s=time.time())
