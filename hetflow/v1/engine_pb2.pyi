from hetflow.v1 import common_pb2 as _common_pb2
from hetflow.v1 import monitor_pb2 as _monitor_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EngineGenerateRequest(_message.Message):
    __slots__ = ("request_id", "prompt", "messages", "sampling", "priority", "program_id", "priority_tiebreak", "retain_kv_s", "reserve_output_tokens", "ticket", "admit")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    PROGRAM_ID_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_TIEBREAK_FIELD_NUMBER: _ClassVar[int]
    RETAIN_KV_S_FIELD_NUMBER: _ClassVar[int]
    RESERVE_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TICKET_FIELD_NUMBER: _ClassVar[int]
    ADMIT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    prompt: str
    messages: _containers.RepeatedCompositeFieldContainer[_common_pb2.ChatMessage]
    sampling: _common_pb2.SamplingParams
    priority: float
    program_id: str
    priority_tiebreak: float
    retain_kv_s: float
    reserve_output_tokens: int
    ticket: DispatchTicket
    admit: _monitor_pb2.AdmitRequest
    def __init__(self, request_id: _Optional[str] = ..., prompt: _Optional[str] = ..., messages: _Optional[_Iterable[_Union[_common_pb2.ChatMessage, _Mapping]]] = ..., sampling: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ..., priority: _Optional[float] = ..., program_id: _Optional[str] = ..., priority_tiebreak: _Optional[float] = ..., retain_kv_s: _Optional[float] = ..., reserve_output_tokens: _Optional[int] = ..., ticket: _Optional[_Union[DispatchTicket, _Mapping]] = ..., admit: _Optional[_Union[_monitor_pb2.AdmitRequest, _Mapping]] = ...) -> None: ...

class DispatchTicket(_message.Message):
    __slots__ = ("claims", "mac")
    CLAIMS_FIELD_NUMBER: _ClassVar[int]
    MAC_FIELD_NUMBER: _ClassVar[int]
    claims: bytes
    mac: bytes
    def __init__(self, claims: _Optional[bytes] = ..., mac: _Optional[bytes] = ...) -> None: ...

class TicketClaims(_message.Message):
    __slots__ = ("request_id", "tenant", "engine_id", "expires_unix_s", "nonce", "request_sha256", "engine_releases")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    NONCE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_SHA256_FIELD_NUMBER: _ClassVar[int]
    ENGINE_RELEASES_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    tenant: str
    engine_id: str
    expires_unix_s: float
    nonce: bytes
    request_sha256: bytes
    engine_releases: bool
    def __init__(self, request_id: _Optional[str] = ..., tenant: _Optional[str] = ..., engine_id: _Optional[str] = ..., expires_unix_s: _Optional[float] = ..., nonce: _Optional[bytes] = ..., request_sha256: _Optional[bytes] = ..., engine_releases: _Optional[bool] = ...) -> None: ...

class EngineChunk(_message.Message):
    __slots__ = ("request_id", "text", "output_tokens", "prompt_tokens", "finished", "finish_reason", "queued_s", "preemptions")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    QUEUED_S_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIONS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    text: str
    output_tokens: int
    prompt_tokens: int
    finished: bool
    finish_reason: str
    queued_s: float
    preemptions: int
    def __init__(self, request_id: _Optional[str] = ..., text: _Optional[str] = ..., output_tokens: _Optional[int] = ..., prompt_tokens: _Optional[int] = ..., finished: _Optional[bool] = ..., finish_reason: _Optional[str] = ..., queued_s: _Optional[float] = ..., preemptions: _Optional[int] = ...) -> None: ...

class HoldMessage(_message.Message):
    __slots__ = ("request", "end")
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    request: EngineGenerateRequest
    end: HoldEnd
    def __init__(self, request: _Optional[_Union[EngineGenerateRequest, _Mapping]] = ..., end: _Optional[_Union[HoldEnd, _Mapping]] = ...) -> None: ...

class HoldEnd(_message.Message):
    __slots__ = ("output_tokens", "finish_reason", "started_unix_s", "error")
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    STARTED_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    output_tokens: int
    finish_reason: str
    started_unix_s: float
    error: str
    def __init__(self, output_tokens: _Optional[int] = ..., finish_reason: _Optional[str] = ..., started_unix_s: _Optional[float] = ..., error: _Optional[str] = ...) -> None: ...

class HoldGrant(_message.Message):
    __slots__ = ("url", "body_json", "prompt_tokens", "queued_s", "request_id")
    URL_FIELD_NUMBER: _ClassVar[int]
    BODY_JSON_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    QUEUED_S_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    url: str
    body_json: bytes
    prompt_tokens: int
    queued_s: float
    request_id: str
    def __init__(self, url: _Optional[str] = ..., body_json: _Optional[bytes] = ..., prompt_tokens: _Optional[int] = ..., queued_s: _Optional[float] = ..., request_id: _Optional[str] = ...) -> None: ...

class AbortRequest(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class AbortReply(_message.Message):
    __slots__ = ("found",)
    FOUND_FIELD_NUMBER: _ClassVar[int]
    found: bool
    def __init__(self, found: _Optional[bool] = ...) -> None: ...

class EngineStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
