from hetflow.v1 import common_pb2 as _common_pb2
from hetflow.v1 import engine_pb2 as _engine_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WorkloadRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DecideRequest(_message.Message):
    __slots__ = ("call", "failed")
    CALL_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    call: GenerateRequest
    failed: _containers.RepeatedCompositeFieldContainer[FailedDispatch]
    def __init__(self, call: _Optional[_Union[GenerateRequest, _Mapping]] = ..., failed: _Optional[_Iterable[_Union[FailedDispatch, _Mapping]]] = ...) -> None: ...

class DecideStreamRequest(_message.Message):
    __slots__ = ("tag", "decide", "timeout_s", "cancel", "sent_after_s")
    TAG_FIELD_NUMBER: _ClassVar[int]
    DECIDE_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    SENT_AFTER_S_FIELD_NUMBER: _ClassVar[int]
    tag: int
    decide: DecideRequest
    timeout_s: float
    cancel: bool
    sent_after_s: float
    def __init__(self, tag: _Optional[int] = ..., decide: _Optional[_Union[DecideRequest, _Mapping]] = ..., timeout_s: _Optional[float] = ..., cancel: _Optional[bool] = ..., sent_after_s: _Optional[float] = ...) -> None: ...

class DecideStreamReply(_message.Message):
    __slots__ = ("tag", "decision", "status", "retry_after_s")
    TAG_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_S_FIELD_NUMBER: _ClassVar[int]
    tag: int
    decision: DispatchDecision
    status: _common_pb2.BatchStatus
    retry_after_s: float
    def __init__(self, tag: _Optional[int] = ..., decision: _Optional[_Union[DispatchDecision, _Mapping]] = ..., status: _Optional[_Union[_common_pb2.BatchStatus, _Mapping]] = ..., retry_after_s: _Optional[float] = ...) -> None: ...

class FailedDispatch(_message.Message):
    __slots__ = ("engine_id", "code", "details")
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    engine_id: str
    code: str
    details: str
    def __init__(self, engine_id: _Optional[str] = ..., code: _Optional[str] = ..., details: _Optional[str] = ...) -> None: ...

class DispatchDecision(_message.Message):
    __slots__ = ("request_id", "model", "engine_id", "engine_address", "engine_request", "receipt", "ticket_expires_unix_s")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_REQUEST_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    TICKET_EXPIRES_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    model: str
    engine_id: str
    engine_address: str
    engine_request: _engine_pb2.EngineGenerateRequest
    receipt: Receipt
    ticket_expires_unix_s: float
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[str] = ..., engine_id: _Optional[str] = ..., engine_address: _Optional[str] = ..., engine_request: _Optional[_Union[_engine_pb2.EngineGenerateRequest, _Mapping]] = ..., receipt: _Optional[_Union[Receipt, _Mapping]] = ..., ticket_expires_unix_s: _Optional[float] = ...) -> None: ...

class WorkloadReply(_message.Message):
    __slots__ = ("window_s", "rate_per_s", "samples", "cascade_models", "cascade_thresholds")
    WINDOW_S_FIELD_NUMBER: _ClassVar[int]
    RATE_PER_S_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    CASCADE_MODELS_FIELD_NUMBER: _ClassVar[int]
    CASCADE_THRESHOLDS_FIELD_NUMBER: _ClassVar[int]
    window_s: float
    rate_per_s: float
    samples: _containers.RepeatedCompositeFieldContainer[WorkloadSample]
    cascade_models: _containers.RepeatedScalarFieldContainer[str]
    cascade_thresholds: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, window_s: _Optional[float] = ..., rate_per_s: _Optional[float] = ..., samples: _Optional[_Iterable[_Union[WorkloadSample, _Mapping]]] = ..., cascade_models: _Optional[_Iterable[str]] = ..., cascade_thresholds: _Optional[_Iterable[float]] = ...) -> None: ...

class WorkloadSample(_message.Message):
    __slots__ = ("received_unix_s", "prompt", "input_tokens", "output_tokens", "first_grade")
    RECEIVED_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    FIRST_GRADE_FIELD_NUMBER: _ClassVar[int]
    received_unix_s: float
    prompt: str
    input_tokens: int
    output_tokens: int
    first_grade: float
    def __init__(self, received_unix_s: _Optional[float] = ..., prompt: _Optional[str] = ..., input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., first_grade: _Optional[float] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("request_id", "messages", "prompt", "sampling", "workflow", "model_pin", "want_receipt")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    MODEL_PIN_FIELD_NUMBER: _ClassVar[int]
    WANT_RECEIPT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    messages: _containers.RepeatedCompositeFieldContainer[_common_pb2.ChatMessage]
    prompt: str
    sampling: _common_pb2.SamplingParams
    workflow: _common_pb2.WorkflowMeta
    model_pin: str
    want_receipt: bool
    def __init__(self, request_id: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[_common_pb2.ChatMessage, _Mapping]]] = ..., prompt: _Optional[str] = ..., sampling: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ..., workflow: _Optional[_Union[_common_pb2.WorkflowMeta, _Mapping]] = ..., model_pin: _Optional[str] = ..., want_receipt: _Optional[bool] = ...) -> None: ...

class GenerateChunk(_message.Message):
    __slots__ = ("request_id", "text", "output_tokens", "finished", "finish_reason", "receipt", "usage", "queued_s", "model", "engine_id")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    QUEUED_S_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    text: str
    output_tokens: int
    finished: bool
    finish_reason: str
    receipt: Receipt
    usage: _common_pb2.Usage
    queued_s: float
    model: str
    engine_id: str
    def __init__(self, request_id: _Optional[str] = ..., text: _Optional[str] = ..., output_tokens: _Optional[int] = ..., finished: _Optional[bool] = ..., finish_reason: _Optional[str] = ..., receipt: _Optional[_Union[Receipt, _Mapping]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., queued_s: _Optional[float] = ..., model: _Optional[str] = ..., engine_id: _Optional[str] = ...) -> None: ...

class CompletionReply(_message.Message):
    __slots__ = ("request_id", "text", "finish_reason", "usage", "model", "engine_id", "receipt", "queued_s")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    QUEUED_S_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    text: str
    finish_reason: str
    usage: _common_pb2.Usage
    model: str
    engine_id: str
    receipt: Receipt
    queued_s: float
    def __init__(self, request_id: _Optional[str] = ..., text: _Optional[str] = ..., finish_reason: _Optional[str] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., model: _Optional[str] = ..., engine_id: _Optional[str] = ..., receipt: _Optional[_Union[Receipt, _Mapping]] = ..., queued_s: _Optional[float] = ...) -> None: ...

class StageDecision(_message.Message):
    __slots__ = ("stage", "plugin", "rule", "chosen", "scores", "loads", "params", "elapsed_ms", "scorers")
    class ScoresEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class LoadsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class ParamsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class ScorersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: EngineScores
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[EngineScores, _Mapping]] = ...) -> None: ...
    STAGE_FIELD_NUMBER: _ClassVar[int]
    PLUGIN_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    CHOSEN_FIELD_NUMBER: _ClassVar[int]
    SCORES_FIELD_NUMBER: _ClassVar[int]
    LOADS_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_MS_FIELD_NUMBER: _ClassVar[int]
    SCORERS_FIELD_NUMBER: _ClassVar[int]
    stage: str
    plugin: str
    rule: str
    chosen: str
    scores: _containers.ScalarMap[str, float]
    loads: _containers.ScalarMap[str, float]
    params: _containers.ScalarMap[str, float]
    elapsed_ms: float
    scorers: _containers.MessageMap[str, EngineScores]
    def __init__(self, stage: _Optional[str] = ..., plugin: _Optional[str] = ..., rule: _Optional[str] = ..., chosen: _Optional[str] = ..., scores: _Optional[_Mapping[str, float]] = ..., loads: _Optional[_Mapping[str, float]] = ..., params: _Optional[_Mapping[str, float]] = ..., elapsed_ms: _Optional[float] = ..., scorers: _Optional[_Mapping[str, EngineScores]] = ...) -> None: ...

class EngineScores(_message.Message):
    __slots__ = ("per_engine",)
    class PerEngineEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    PER_ENGINE_FIELD_NUMBER: _ClassVar[int]
    per_engine: _containers.ScalarMap[str, float]
    def __init__(self, per_engine: _Optional[_Mapping[str, float]] = ...) -> None: ...

class Receipt(_message.Message):
    __slots__ = ("request_id", "program_id", "model", "engine_id", "priority", "predicted_tokens", "stages", "decision_ms", "snapshot_unix_s", "priority_tiebreak", "stale_snapshot_s", "redispatched_from", "cascade", "workflow", "inferred_stages")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PROGRAM_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STAGES_FIELD_NUMBER: _ClassVar[int]
    DECISION_MS_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_TIEBREAK_FIELD_NUMBER: _ClassVar[int]
    STALE_SNAPSHOT_S_FIELD_NUMBER: _ClassVar[int]
    REDISPATCHED_FROM_FIELD_NUMBER: _ClassVar[int]
    CASCADE_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    INFERRED_STAGES_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    program_id: str
    model: str
    engine_id: str
    priority: float
    predicted_tokens: float
    stages: _containers.RepeatedCompositeFieldContainer[StageDecision]
    decision_ms: float
    snapshot_unix_s: float
    priority_tiebreak: float
    stale_snapshot_s: float
    redispatched_from: _containers.RepeatedScalarFieldContainer[str]
    cascade: _containers.RepeatedCompositeFieldContainer[CascadeStage]
    workflow: _common_pb2.WorkflowMeta
    inferred_stages: _common_pb2.StageInference
    def __init__(self, request_id: _Optional[str] = ..., program_id: _Optional[str] = ..., model: _Optional[str] = ..., engine_id: _Optional[str] = ..., priority: _Optional[float] = ..., predicted_tokens: _Optional[float] = ..., stages: _Optional[_Iterable[_Union[StageDecision, _Mapping]]] = ..., decision_ms: _Optional[float] = ..., snapshot_unix_s: _Optional[float] = ..., priority_tiebreak: _Optional[float] = ..., stale_snapshot_s: _Optional[float] = ..., redispatched_from: _Optional[_Iterable[str]] = ..., cascade: _Optional[_Iterable[_Union[CascadeStage, _Mapping]]] = ..., workflow: _Optional[_Union[_common_pb2.WorkflowMeta, _Mapping]] = ..., inferred_stages: _Optional[_Union[_common_pb2.StageInference, _Mapping]] = ...) -> None: ...

class CascadeStage(_message.Message):
    __slots__ = ("model", "engine_id", "request_id", "outcome", "score", "threshold", "why", "judge", "judge_ms", "stage_ms", "output_tokens")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    WHY_FIELD_NUMBER: _ClassVar[int]
    JUDGE_FIELD_NUMBER: _ClassVar[int]
    JUDGE_MS_FIELD_NUMBER: _ClassVar[int]
    STAGE_MS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    model: str
    engine_id: str
    request_id: str
    outcome: str
    score: float
    threshold: float
    why: str
    judge: str
    judge_ms: float
    stage_ms: float
    output_tokens: int
    def __init__(self, model: _Optional[str] = ..., engine_id: _Optional[str] = ..., request_id: _Optional[str] = ..., outcome: _Optional[str] = ..., score: _Optional[float] = ..., threshold: _Optional[float] = ..., why: _Optional[str] = ..., judge: _Optional[str] = ..., judge_ms: _Optional[float] = ..., stage_ms: _Optional[float] = ..., output_tokens: _Optional[int] = ...) -> None: ...
