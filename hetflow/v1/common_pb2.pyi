from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class BatchStatus(_message.Message):
    __slots__ = ("code", "details")
    CODE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    code: int
    details: str
    def __init__(self, code: _Optional[int] = ..., details: _Optional[str] = ...) -> None: ...

class ChatMessage(_message.Message):
    __slots__ = ("role", "content")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    role: str
    content: str
    def __init__(self, role: _Optional[str] = ..., content: _Optional[str] = ...) -> None: ...

class SamplingParams(_message.Message):
    __slots__ = ("max_tokens", "temperature", "top_p", "seed", "ignore_eos", "stop", "presence_penalty", "frequency_penalty")
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    IGNORE_EOS_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_PENALTY_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_PENALTY_FIELD_NUMBER: _ClassVar[int]
    max_tokens: int
    temperature: float
    top_p: float
    seed: int
    ignore_eos: bool
    stop: _containers.RepeatedScalarFieldContainer[str]
    presence_penalty: float
    frequency_penalty: float
    def __init__(self, max_tokens: _Optional[int] = ..., temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., seed: _Optional[int] = ..., ignore_eos: _Optional[bool] = ..., stop: _Optional[_Iterable[str]] = ..., presence_penalty: _Optional[float] = ..., frequency_penalty: _Optional[float] = ...) -> None: ...

class WorkflowMeta(_message.Message):
    __slots__ = ("program_id", "workflow", "agent", "stage_index", "stage_count", "upstream_agent", "tenant", "deadline_unix_s", "identity_source")
    PROGRAM_ID_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    STAGE_INDEX_FIELD_NUMBER: _ClassVar[int]
    STAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_AGENT_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_SOURCE_FIELD_NUMBER: _ClassVar[int]
    program_id: str
    workflow: str
    agent: str
    stage_index: int
    stage_count: int
    upstream_agent: str
    tenant: str
    deadline_unix_s: float
    identity_source: str
    def __init__(self, program_id: _Optional[str] = ..., workflow: _Optional[str] = ..., agent: _Optional[str] = ..., stage_index: _Optional[int] = ..., stage_count: _Optional[int] = ..., upstream_agent: _Optional[str] = ..., tenant: _Optional[str] = ..., deadline_unix_s: _Optional[float] = ..., identity_source: _Optional[str] = ...) -> None: ...

class StageInference(_message.Message):
    __slots__ = ("stage_index", "stage_count", "runs_seen")
    STAGE_INDEX_FIELD_NUMBER: _ClassVar[int]
    STAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    RUNS_SEEN_FIELD_NUMBER: _ClassVar[int]
    stage_index: int
    stage_count: int
    runs_seen: int
    def __init__(self, stage_index: _Optional[int] = ..., stage_count: _Optional[int] = ..., runs_seen: _Optional[int] = ...) -> None: ...

class TimingProfile(_message.Message):
    __slots__ = ("name", "model", "gpu", "prefill_ms_per_token", "decode_base_ms", "decode_ms_per_batch_token", "decode_ms_per_token", "max_batch_size", "kv_capacity_tokens", "block_size", "decode_ms_per_seq", "max_num_batched_tokens", "max_model_len")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    GPU_FIELD_NUMBER: _ClassVar[int]
    PREFILL_MS_PER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    DECODE_BASE_MS_FIELD_NUMBER: _ClassVar[int]
    DECODE_MS_PER_BATCH_TOKEN_FIELD_NUMBER: _ClassVar[int]
    DECODE_MS_PER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    KV_CAPACITY_TOKENS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    DECODE_MS_PER_SEQ_FIELD_NUMBER: _ClassVar[int]
    MAX_NUM_BATCHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_MODEL_LEN_FIELD_NUMBER: _ClassVar[int]
    name: str
    model: str
    gpu: str
    prefill_ms_per_token: float
    decode_base_ms: float
    decode_ms_per_batch_token: float
    decode_ms_per_token: float
    max_batch_size: int
    kv_capacity_tokens: int
    block_size: int
    decode_ms_per_seq: float
    max_num_batched_tokens: int
    max_model_len: int
    def __init__(self, name: _Optional[str] = ..., model: _Optional[str] = ..., gpu: _Optional[str] = ..., prefill_ms_per_token: _Optional[float] = ..., decode_base_ms: _Optional[float] = ..., decode_ms_per_batch_token: _Optional[float] = ..., decode_ms_per_token: _Optional[float] = ..., max_batch_size: _Optional[int] = ..., kv_capacity_tokens: _Optional[int] = ..., block_size: _Optional[int] = ..., decode_ms_per_seq: _Optional[float] = ..., max_num_batched_tokens: _Optional[int] = ..., max_model_len: _Optional[int] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("prompt_tokens", "output_tokens")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    output_tokens: int
    def __init__(self, prompt_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ...) -> None: ...

class EngineStatus(_message.Message):
    __slots__ = ("engine_id", "model", "address", "backend", "serving", "waiting", "running", "kv_cache_usage", "preemptions_total", "profile", "active_request_ids", "reported_unix_s", "pending_prefill_tokens", "serving_endpoint", "incarnation")
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    SERVING_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    KV_CACHE_USAGE_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIONS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_REQUEST_IDS_FIELD_NUMBER: _ClassVar[int]
    REPORTED_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    PENDING_PREFILL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SERVING_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    engine_id: str
    model: str
    address: str
    backend: str
    serving: bool
    waiting: int
    running: int
    kv_cache_usage: float
    preemptions_total: int
    profile: TimingProfile
    active_request_ids: _containers.RepeatedScalarFieldContainer[str]
    reported_unix_s: float
    pending_prefill_tokens: int
    serving_endpoint: str
    incarnation: str
    def __init__(self, engine_id: _Optional[str] = ..., model: _Optional[str] = ..., address: _Optional[str] = ..., backend: _Optional[str] = ..., serving: _Optional[bool] = ..., waiting: _Optional[int] = ..., running: _Optional[int] = ..., kv_cache_usage: _Optional[float] = ..., preemptions_total: _Optional[int] = ..., profile: _Optional[_Union[TimingProfile, _Mapping]] = ..., active_request_ids: _Optional[_Iterable[str]] = ..., reported_unix_s: _Optional[float] = ..., pending_prefill_tokens: _Optional[int] = ..., serving_endpoint: _Optional[str] = ..., incarnation: _Optional[str] = ...) -> None: ...
