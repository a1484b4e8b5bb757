from hetflow.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WatchEnginesRequest(_message.Message):
    __slots__ = ("in_flight_calls",)
    IN_FLIGHT_CALLS_FIELD_NUMBER: _ClassVar[int]
    in_flight_calls: bool
    def __init__(self, in_flight_calls: _Optional[bool] = ...) -> None: ...

class EngineChanges(_message.Message):
    __slots__ = ("taken_unix_s", "admit_seq", "monitor_epoch", "full", "engines", "removed_engine_ids")
    TAKEN_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    ADMIT_SEQ_FIELD_NUMBER: _ClassVar[int]
    MONITOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    FULL_FIELD_NUMBER: _ClassVar[int]
    ENGINES_FIELD_NUMBER: _ClassVar[int]
    REMOVED_ENGINE_IDS_FIELD_NUMBER: _ClassVar[int]
    taken_unix_s: float
    admit_seq: int
    monitor_epoch: str
    full: bool
    engines: _containers.RepeatedCompositeFieldContainer[EngineLoad]
    removed_engine_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, taken_unix_s: _Optional[float] = ..., admit_seq: _Optional[int] = ..., monitor_epoch: _Optional[str] = ..., full: _Optional[bool] = ..., engines: _Optional[_Iterable[_Union[EngineLoad, _Mapping]]] = ..., removed_engine_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class ReleaseBatchRequest(_message.Message):
    __slots__ = ("releases",)
    RELEASES_FIELD_NUMBER: _ClassVar[int]
    releases: _containers.RepeatedCompositeFieldContainer[ReleaseRequest]
    def __init__(self, releases: _Optional[_Iterable[_Union[ReleaseRequest, _Mapping]]] = ...) -> None: ...

class ReleaseBatchReply(_message.Message):
    __slots__ = ("replies", "status")
    REPLIES_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    replies: _containers.RepeatedCompositeFieldContainer[ReleaseReply]
    status: _common_pb2.BatchStatus
    def __init__(self, replies: _Optional[_Iterable[_Union[ReleaseReply, _Mapping]]] = ..., status: _Optional[_Union[_common_pb2.BatchStatus, _Mapping]] = ...) -> None: ...

class SnapshotsRequest(_message.Message):
    __slots__ = ("calls",)
    CALLS_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[SnapshotRequest]
    def __init__(self, calls: _Optional[_Iterable[_Union[SnapshotRequest, _Mapping]]] = ...) -> None: ...

class SnapshotsReply(_message.Message):
    __slots__ = ("snapshots", "status")
    SNAPSHOTS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    snapshots: _containers.RepeatedCompositeFieldContainer[MonitorSnapshot]
    status: _common_pb2.BatchStatus
    def __init__(self, snapshots: _Optional[_Iterable[_Union[MonitorSnapshot, _Mapping]]] = ..., status: _Optional[_Union[_common_pb2.BatchStatus, _Mapping]] = ...) -> None: ...

class AdmitBatchRequest(_message.Message):
    __slots__ = ("admits",)
    ADMITS_FIELD_NUMBER: _ClassVar[int]
    admits: _containers.RepeatedCompositeFieldContainer[AdmitRequest]
    def __init__(self, admits: _Optional[_Iterable[_Union[AdmitRequest, _Mapping]]] = ...) -> None: ...

class AdmitOutcome(_message.Message):
    __slots__ = ("reply", "code", "details")
    REPLY_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_FIELD_NUMBER: _ClassVar[int]
    reply: AdmitReply
    code: int
    details: str
    def __init__(self, reply: _Optional[_Union[AdmitReply, _Mapping]] = ..., code: _Optional[int] = ..., details: _Optional[str] = ...) -> None: ...

class AdmitBatchReply(_message.Message):
    __slots__ = ("outcomes", "status")
    OUTCOMES_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    outcomes: _containers.RepeatedCompositeFieldContainer[AdmitOutcome]
    status: _common_pb2.BatchStatus
    def __init__(self, outcomes: _Optional[_Iterable[_Union[AdmitOutcome, _Mapping]]] = ..., status: _Optional[_Union[_common_pb2.BatchStatus, _Mapping]] = ...) -> None: ...

class AdmitRequest(_message.Message):
    __slots__ = ("request_id", "program_id", "model", "engine_id", "predicted_tokens", "workflow", "prompt_tokens", "predicted_cost_s", "decode_tokens_per_s", "expected_s", "mean_cost_s", "prefix_blocks", "reregister", "retain_kv_s", "via_gateway", "stages_inferred", "within_kv", "within_working_set")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PROGRAM_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_COST_S_FIELD_NUMBER: _ClassVar[int]
    DECODE_TOKENS_PER_S_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_S_FIELD_NUMBER: _ClassVar[int]
    MEAN_COST_S_FIELD_NUMBER: _ClassVar[int]
    PREFIX_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    REREGISTER_FIELD_NUMBER: _ClassVar[int]
    RETAIN_KV_S_FIELD_NUMBER: _ClassVar[int]
    VIA_GATEWAY_FIELD_NUMBER: _ClassVar[int]
    STAGES_INFERRED_FIELD_NUMBER: _ClassVar[int]
    WITHIN_KV_FIELD_NUMBER: _ClassVar[int]
    WITHIN_WORKING_SET_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    program_id: str
    model: str
    engine_id: str
    predicted_tokens: float
    workflow: _common_pb2.WorkflowMeta
    prompt_tokens: int
    predicted_cost_s: float
    decode_tokens_per_s: float
    expected_s: float
    mean_cost_s: float
    prefix_blocks: _containers.RepeatedScalarFieldContainer[int]
    reregister: bool
    retain_kv_s: float
    via_gateway: bool
    stages_inferred: bool
    within_kv: bool
    within_working_set: WorkingSetRoom
    def __init__(self, request_id: _Optional[str] = ..., program_id: _Optional[str] = ..., model: _Optional[str] = ..., engine_id: _Optional[str] = ..., predicted_tokens: _Optional[float] = ..., workflow: _Optional[_Union[_common_pb2.WorkflowMeta, _Mapping]] = ..., prompt_tokens: _Optional[int] = ..., predicted_cost_s: _Optional[float] = ..., decode_tokens_per_s: _Optional[float] = ..., expected_s: _Optional[float] = ..., mean_cost_s: _Optional[float] = ..., prefix_blocks: _Optional[_Iterable[int]] = ..., reregister: _Optional[bool] = ..., retain_kv_s: _Optional[float] = ..., via_gateway: _Optional[bool] = ..., stages_inferred: _Optional[bool] = ..., within_kv: _Optional[bool] = ..., within_working_set: _Optional[_Union[WorkingSetRoom, _Mapping]] = ...) -> None: ...

class WorkingSetRoom(_message.Message):
    __slots__ = ("need_tokens", "limit_tokens", "growth_share")
    NEED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    GROWTH_SHARE_FIELD_NUMBER: _ClassVar[int]
    need_tokens: float
    limit_tokens: float
    growth_share: float
    def __init__(self, need_tokens: _Optional[float] = ..., limit_tokens: _Optional[float] = ..., growth_share: _Optional[float] = ...) -> None: ...

class AdmitReply(_message.Message):
    __slots__ = ("program_model", "admit_seq", "monitor_epoch")
    PROGRAM_MODEL_FIELD_NUMBER: _ClassVar[int]
    ADMIT_SEQ_FIELD_NUMBER: _ClassVar[int]
    MONITOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    program_model: str
    admit_seq: int
    monitor_epoch: str
    def __init__(self, program_model: _Optional[str] = ..., admit_seq: _Optional[int] = ..., monitor_epoch: _Optional[str] = ...) -> None: ...

class ReleaseRequest(_message.Message):
    __slots__ = ("request_id", "output_tokens", "reason", "started_unix_s")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    STARTED_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    output_tokens: int
    reason: str
    started_unix_s: float
    def __init__(self, request_id: _Optional[str] = ..., output_tokens: _Optional[int] = ..., reason: _Optional[str] = ..., started_unix_s: _Optional[float] = ...) -> None: ...

class ReleaseReply(_message.Message):
    __slots__ = ("found",)
    FOUND_FIELD_NUMBER: _ClassVar[int]
    found: bool
    def __init__(self, found: _Optional[bool] = ...) -> None: ...

class ReportReply(_message.Message):
    __slots__ = ("orphans_removed", "monitor_epoch", "status", "engine_stale_after_s")
    ORPHANS_REMOVED_FIELD_NUMBER: _ClassVar[int]
    MONITOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_STALE_AFTER_S_FIELD_NUMBER: _ClassVar[int]
    orphans_removed: int
    monitor_epoch: str
    status: _common_pb2.BatchStatus
    engine_stale_after_s: float
    def __init__(self, orphans_removed: _Optional[int] = ..., monitor_epoch: _Optional[str] = ..., status: _Optional[_Union[_common_pb2.BatchStatus, _Mapping]] = ..., engine_stale_after_s: _Optional[float] = ...) -> None: ...

class EngineFailure(_message.Message):
    __slots__ = ("engine_id", "reason")
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    engine_id: str
    reason: str
    def __init__(self, engine_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class SnapshotRequest(_message.Message):
    __slots__ = ("program_id", "agent", "workflow", "stage_index", "stage_count", "prefix_blocks", "in_flight_calls", "upstream_agent", "request_ids", "without_engines")
    PROGRAM_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    STAGE_INDEX_FIELD_NUMBER: _ClassVar[int]
    STAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    PREFIX_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_CALLS_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_AGENT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_IDS_FIELD_NUMBER: _ClassVar[int]
    WITHOUT_ENGINES_FIELD_NUMBER: _ClassVar[int]
    program_id: str
    agent: str
    workflow: str
    stage_index: int
    stage_count: int
    prefix_blocks: _containers.RepeatedScalarFieldContainer[int]
    in_flight_calls: bool
    upstream_agent: str
    request_ids: bool
    without_engines: bool
    def __init__(self, program_id: _Optional[str] = ..., agent: _Optional[str] = ..., workflow: _Optional[str] = ..., stage_index: _Optional[int] = ..., stage_count: _Optional[int] = ..., prefix_blocks: _Optional[_Iterable[int]] = ..., in_flight_calls: _Optional[bool] = ..., upstream_agent: _Optional[str] = ..., request_ids: _Optional[bool] = ..., without_engines: _Optional[bool] = ...) -> None: ...

class EngineLoad(_message.Message):
    __slots__ = ("status", "in_flight_tokens", "in_flight_requests", "healthy", "status_age_s", "in_flight_cost_s", "kv_ledger_tokens", "suspended", "dispatched_since_report", "prefix_match_blocks", "prefix_index_blocks", "pending_prefill_tokens", "resident_tokens", "in_flight_calls", "resident_programs", "resident_growth_tokens")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    STATUS_AGE_S_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_COST_S_FIELD_NUMBER: _ClassVar[int]
    KV_LEDGER_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SUSPENDED_FIELD_NUMBER: _ClassVar[int]
    DISPATCHED_SINCE_REPORT_FIELD_NUMBER: _ClassVar[int]
    PREFIX_MATCH_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_INDEX_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    PENDING_PREFILL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    RESIDENT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_CALLS_FIELD_NUMBER: _ClassVar[int]
    RESIDENT_PROGRAMS_FIELD_NUMBER: _ClassVar[int]
    RESIDENT_GROWTH_TOKENS_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.EngineStatus
    in_flight_tokens: float
    in_flight_requests: int
    healthy: bool
    status_age_s: float
    in_flight_cost_s: float
    kv_ledger_tokens: _containers.RepeatedScalarFieldContainer[float]
    suspended: bool
    dispatched_since_report: int
    prefix_match_blocks: int
    prefix_index_blocks: int
    pending_prefill_tokens: int
    resident_tokens: int
    in_flight_calls: _containers.RepeatedCompositeFieldContainer[InFlightCall]
    resident_programs: int
    resident_growth_tokens: int
    def __init__(self, status: _Optional[_Union[_common_pb2.EngineStatus, _Mapping]] = ..., in_flight_tokens: _Optional[float] = ..., in_flight_requests: _Optional[int] = ..., healthy: _Optional[bool] = ..., status_age_s: _Optional[float] = ..., in_flight_cost_s: _Optional[float] = ..., kv_ledger_tokens: _Optional[_Iterable[float]] = ..., suspended: _Optional[bool] = ..., dispatched_since_report: _Optional[int] = ..., prefix_match_blocks: _Optional[int] = ..., prefix_index_blocks: _Optional[int] = ..., pending_prefill_tokens: _Optional[int] = ..., resident_tokens: _Optional[int] = ..., in_flight_calls: _Optional[_Iterable[_Union[InFlightCall, _Mapping]]] = ..., resident_programs: _Optional[int] = ..., resident_growth_tokens: _Optional[int] = ...) -> None: ...

class InFlightCall(_message.Message):
    __slots__ = ("prompt_tokens", "predicted_tokens", "admitted_unix_s")
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ADMITTED_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    prompt_tokens: int
    predicted_tokens: float
    admitted_unix_s: float
    def __init__(self, prompt_tokens: _Optional[int] = ..., predicted_tokens: _Optional[float] = ..., admitted_unix_s: _Optional[float] = ...) -> None: ...

class ProgramDispatch(_message.Message):
    __slots__ = ("engine_id", "prompt_tokens")
    ENGINE_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    engine_id: str
    prompt_tokens: int
    def __init__(self, engine_id: _Optional[str] = ..., prompt_tokens: _Optional[int] = ...) -> None: ...

class MonitorSnapshot(_message.Message):
    __slots__ = ("taken_unix_s", "engines", "program_model", "admit_seq", "program_start_unix_s", "agent_anchor_distance_s", "agent_expected_s", "anchor_distance_median_s", "remaining_stage_costs_s", "program_service_s", "program_critical_service_s", "program_dispatches", "monitor_epoch", "agent_tool_gap", "inferred_stages", "prefix_match_blocks", "engine_count", "healthy_engine_count")
    class PrefixMatchBlocksEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    TAKEN_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    ENGINES_FIELD_NUMBER: _ClassVar[int]
    PROGRAM_MODEL_FIELD_NUMBER: _ClassVar[int]
    ADMIT_SEQ_FIELD_NUMBER: _ClassVar[int]
    PROGRAM_START_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    AGENT_ANCHOR_DISTANCE_S_FIELD_NUMBER: _ClassVar[int]
    AGENT_EXPECTED_S_FIELD_NUMBER: _ClassVar[int]
    ANCHOR_DISTANCE_MEDIAN_S_FIELD_NUMBER: _ClassVar[int]
    REMAINING_STAGE_COSTS_S_FIELD_NUMBER: _ClassVar[int]
    PROGRAM_SERVICE_S_FIELD_NUMBER: _ClassVar[int]
    PROGRAM_CRITICAL_SERVICE_S_FIELD_NUMBER: _ClassVar[int]
    PROGRAM_DISPATCHES_FIELD_NUMBER: _ClassVar[int]
    MONITOR_EPOCH_FIELD_NUMBER: _ClassVar[int]
    AGENT_TOOL_GAP_FIELD_NUMBER: _ClassVar[int]
    INFERRED_STAGES_FIELD_NUMBER: _ClassVar[int]
    PREFIX_MATCH_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_COUNT_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_ENGINE_COUNT_FIELD_NUMBER: _ClassVar[int]
    taken_unix_s: float
    engines: _containers.RepeatedCompositeFieldContainer[EngineLoad]
    program_model: str
    admit_seq: int
    program_start_unix_s: float
    agent_anchor_distance_s: float
    agent_expected_s: float
    anchor_distance_median_s: float
    remaining_stage_costs_s: _containers.RepeatedScalarFieldContainer[float]
    program_service_s: float
    program_critical_service_s: float
    program_dispatches: _containers.RepeatedCompositeFieldContainer[ProgramDispatch]
    monitor_epoch: str
    agent_tool_gap: ToolGapFit
    inferred_stages: _common_pb2.StageInference
    prefix_match_blocks: _containers.ScalarMap[str, int]
    engine_count: int
    healthy_engine_count: int
    def __init__(self, taken_unix_s: _Optional[float] = ..., engines: _Optional[_Iterable[_Union[EngineLoad, _Mapping]]] = ..., program_model: _Optional[str] = ..., admit_seq: _Optional[int] = ..., program_start_unix_s: _Optional[float] = ..., agent_anchor_distance_s: _Optional[float] = ..., agent_expected_s: _Optional[float] = ..., anchor_distance_median_s: _Optional[float] = ..., remaining_stage_costs_s: _Optional[_Iterable[float]] = ..., program_service_s: _Optional[float] = ..., program_critical_service_s: _Optional[float] = ..., program_dispatches: _Optional[_Iterable[_Union[ProgramDispatch, _Mapping]]] = ..., monitor_epoch: _Optional[str] = ..., agent_tool_gap: _Optional[_Union[ToolGapFit, _Mapping]] = ..., inferred_stages: _Optional[_Union[_common_pb2.StageInference, _Mapping]] = ..., prefix_match_blocks: _Optional[_Mapping[str, int]] = ..., engine_count: _Optional[int] = ..., healthy_engine_count: _Optional[int] = ...) -> None: ...

class ToolGapFit(_message.Message):
    __slots__ = ("mu", "sigma", "samples")
    MU_FIELD_NUMBER: _ClassVar[int]
    SIGMA_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    mu: float
    sigma: float
    samples: int
    def __init__(self, mu: _Optional[float] = ..., sigma: _Optional[float] = ..., samples: _Optional[int] = ...) -> None: ...

class GetProgramRequest(_message.Message):
    __slots__ = ("program_id",)
    PROGRAM_ID_FIELD_NUMBER: _ClassVar[int]
    program_id: str
    def __init__(self, program_id: _Optional[str] = ...) -> None: ...

class ProgramEntry(_message.Message):
    __slots__ = ("program_id", "model", "workflow", "in_flight_requests", "completed_requests", "output_tokens", "deadline_unix_s", "first_seen_unix_s", "last_seen_unix_s")
    PROGRAM_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEEN_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    LAST_SEEN_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    program_id: str
    model: str
    workflow: str
    in_flight_requests: int
    completed_requests: int
    output_tokens: int
    deadline_unix_s: float
    first_seen_unix_s: float
    last_seen_unix_s: float
    def __init__(self, program_id: _Optional[str] = ..., model: _Optional[str] = ..., workflow: _Optional[str] = ..., in_flight_requests: _Optional[int] = ..., completed_requests: _Optional[int] = ..., output_tokens: _Optional[int] = ..., deadline_unix_s: _Optional[float] = ..., first_seen_unix_s: _Optional[float] = ..., last_seen_unix_s: _Optional[float] = ...) -> None: ...
