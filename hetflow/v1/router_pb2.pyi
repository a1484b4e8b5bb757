from hetflow.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ScoreRequest(_message.Message):
    __slots__ = ("prompts",)
    PROMPTS_FIELD_NUMBER: _ClassVar[int]
    prompts: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, prompts: _Optional[_Iterable[str]] = ...) -> None: ...

class ModelConfidence(_message.Message):
    __slots__ = ("confidence", "truncated")
    class ConfidenceEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    confidence: _containers.ScalarMap[str, float]
    truncated: bool
    def __init__(self, confidence: _Optional[_Mapping[str, float]] = ..., truncated: _Optional[bool] = ...) -> None: ...

class ScoreReply(_message.Message):
    __slots__ = ("scores", "router_kind", "status")
    SCORES_FIELD_NUMBER: _ClassVar[int]
    ROUTER_KIND_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    scores: _containers.RepeatedCompositeFieldContainer[ModelConfidence]
    router_kind: str
    status: _common_pb2.BatchStatus
    def __init__(self, scores: _Optional[_Iterable[_Union[ModelConfidence, _Mapping]]] = ..., router_kind: _Optional[str] = ..., status: _Optional[_Union[_common_pb2.BatchStatus, _Mapping]] = ...) -> None: ...

class DescribeRouterRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RouterDescription(_message.Message):
    __slots__ = ("router_kind", "models")
    ROUTER_KIND_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    router_kind: str
    models: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, router_kind: _Optional[str] = ..., models: _Optional[_Iterable[str]] = ...) -> None: ...
