from hetflow.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FeatureRow(_message.Message):
    __slots__ = ("model", "workflow", "agent", "stage_index", "stage_count", "system_prompt_tokens", "user_prompt_tokens", "input_tokens", "user_prompt")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    STAGE_INDEX_FIELD_NUMBER: _ClassVar[int]
    STAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    USER_PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    USER_PROMPT_FIELD_NUMBER: _ClassVar[int]
    model: str
    workflow: str
    agent: str
    stage_index: int
    stage_count: int
    system_prompt_tokens: int
    user_prompt_tokens: int
    input_tokens: int
    user_prompt: str
    def __init__(self, model: _Optional[str] = ..., workflow: _Optional[str] = ..., agent: _Optional[str] = ..., stage_index: _Optional[int] = ..., stage_count: _Optional[int] = ..., system_prompt_tokens: _Optional[int] = ..., user_prompt_tokens: _Optional[int] = ..., input_tokens: _Optional[int] = ..., user_prompt: _Optional[str] = ...) -> None: ...

class PredictRequest(_message.Message):
    __slots__ = ("rows", "quantiles")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    QUANTILES_FIELD_NUMBER: _ClassVar[int]
    rows: _containers.RepeatedCompositeFieldContainer[FeatureRow]
    quantiles: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, rows: _Optional[_Iterable[_Union[FeatureRow, _Mapping]]] = ..., quantiles: _Optional[_Iterable[float]] = ...) -> None: ...

class Prediction(_message.Message):
    __slots__ = ("median_tokens", "quantile_tokens")
    MEDIAN_TOKENS_FIELD_NUMBER: _ClassVar[int]
    QUANTILE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    median_tokens: float
    quantile_tokens: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, median_tokens: _Optional[float] = ..., quantile_tokens: _Optional[_Iterable[float]] = ...) -> None: ...

class PredictReply(_message.Message):
    __slots__ = ("predictions", "predictor_kind", "status")
    PREDICTIONS_FIELD_NUMBER: _ClassVar[int]
    PREDICTOR_KIND_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    predictions: _containers.RepeatedCompositeFieldContainer[Prediction]
    predictor_kind: str
    status: _common_pb2.BatchStatus
    def __init__(self, predictions: _Optional[_Iterable[_Union[Prediction, _Mapping]]] = ..., predictor_kind: _Optional[str] = ..., status: _Optional[_Union[_common_pb2.BatchStatus, _Mapping]] = ...) -> None: ...
