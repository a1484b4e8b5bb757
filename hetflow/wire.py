"""protobuf <-> core types for every message more than one service speaks (common.proto and the
monitor's snapshot), each conversion written once. A service's own messages convert in its
``convert`` module; nothing here reads a service's internals.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Mapping, Sequence

from hetflow.core.call import OPTIONAL_SAMPLING_FIELDS, SamplingSpec, StageInference, WorkflowInfo
from hetflow.core.engine.profile import EngineProfile
from hetflow.core.errors import InvalidArgument
from hetflow.core.features import FeatureRow
from hetflow.core.kv_retention import LogNormalFit
from hetflow.core.monitor.state import EngineRecord, EngineStatus
from hetflow.core.policies.contracts import Prediction
from hetflow.core.snapshot import ClusterSnapshot, EngineView, InFlightCall
from hetflow.v1 import common_pb2, monitor_pb2, predictor_pb2

MAX_STOP_STRINGS = 64


def sampling_from_proto(msg: common_pb2.SamplingParams, max_tokens_limit: int) -> SamplingSpec:
    if msg.max_tokens < 1 or msg.max_tokens > max_tokens_limit:
        raise InvalidArgument(f"sampling.max_tokens must be in 1..{max_tokens_limit}, got {msg.max_tokens}")
    # As vLLM's SamplingParams._verify_args: temperature >= 0, 0 < top_p <= 1.
    if msg.HasField("temperature") and not msg.temperature >= 0:
        raise InvalidArgument(f"sampling.temperature must be >= 0, got {msg.temperature}")
    if msg.HasField("top_p") and not 0 < msg.top_p <= 1:
        raise InvalidArgument(f"sampling.top_p must be in (0, 1], got {msg.top_p}")
    for penalty in ("presence_penalty", "frequency_penalty"):  # vLLM's check: -2 <= penalty <= 2
        if msg.HasField(penalty) and not -2 <= getattr(msg, penalty) <= 2:
            raise InvalidArgument(f"sampling.{penalty} must be in [-2, 2], got {getattr(msg, penalty)}")
    if len(msg.stop) > MAX_STOP_STRINGS:
        raise InvalidArgument(f"sampling.stop may hold at most {MAX_STOP_STRINGS} strings, got {len(msg.stop)}")
    return SamplingSpec(
        max_tokens=msg.max_tokens, ignore_eos=msg.ignore_eos, stop=tuple(msg.stop),
        **{name: getattr(msg, name) for name in OPTIONAL_SAMPLING_FIELDS if msg.HasField(name)})


def sampling_to_proto(s: SamplingSpec) -> common_pb2.SamplingParams:
    msg = common_pb2.SamplingParams(max_tokens=s.max_tokens, ignore_eos=s.ignore_eos, stop=list(s.stop))
    for name in OPTIONAL_SAMPLING_FIELDS:
        if getattr(s, name) is not None:
            setattr(msg, name, getattr(s, name))
    return msg


def profile_to_proto(profile: EngineProfile) -> common_pb2.TimingProfile:
    """The linear form the balancer estimates with (``EngineProfile.as_reported``)."""
    p = profile.as_reported()
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


def engine_status_to_proto(s: EngineStatus, reported_unix_s: float = 0.0) -> common_pb2.EngineStatus:
    msg = common_pb2.EngineStatus(
        engine_id=s.engine_id, model=s.model, address=s.address, backend=s.backend, serving=s.serving,
        waiting=s.waiting, running=s.running, kv_cache_usage=s.kv_cache_usage, preemptions_total=s.preemptions_total,
        active_request_ids=list(s.active_request_ids), reported_unix_s=reported_unix_s,
        pending_prefill_tokens=s.pending_prefill_tokens, serving_endpoint=s.serving_endpoint,
        incarnation=s.incarnation)
    if s.profile is not None:
        msg.profile.CopyFrom(profile_to_proto(s.profile))
    return msg


def engine_status_from_proto(msg: common_pb2.EngineStatus) -> EngineStatus:
    if not msg.engine_id:
        raise InvalidArgument("engine_id is required")
    return EngineStatus(
        engine_id=msg.engine_id, model=msg.model, address=msg.address, backend=msg.backend, serving=msg.serving,
        waiting=msg.waiting, running=msg.running, kv_cache_usage=msg.kv_cache_usage,
        preemptions_total=msg.preemptions_total, pending_prefill_tokens=msg.pending_prefill_tokens,
        profile=profile_from_proto(msg.profile) if msg.HasField("profile") else None,
        active_request_ids=tuple(msg.active_request_ids), serving_endpoint=msg.serving_endpoint,
        incarnation=msg.incarnation)


def workflow_to_proto(wf: WorkflowInfo) -> common_pb2.WorkflowMeta:
    msg = common_pb2.WorkflowMeta(program_id=wf.program_id, workflow=wf.workflow, agent=wf.agent,
                                  upstream_agent=wf.upstream_agent, tenant=wf.tenant,
                                  deadline_unix_s=wf.deadline_unix_s, identity_source=wf.identity_source)
    if wf.stage_index:
        msg.stage_index = wf.stage_index
    if wf.stage_count:
        msg.stage_count = wf.stage_count
    return msg


def in_flight_call_to_proto(c: InFlightCall) -> monitor_pb2.InFlightCall:
    return monitor_pb2.InFlightCall(prompt_tokens=c.prompt_tokens, predicted_tokens=c.predicted_tokens,
                                    admitted_unix_s=c.admitted_s)


def in_flight_call_from_proto(msg: monitor_pb2.InFlightCall) -> InFlightCall:
    return InFlightCall(prompt_tokens=msg.prompt_tokens, predicted_tokens=msg.predicted_tokens,
                        admitted_s=msg.admitted_unix_s)


class ReportProtos:
    """Each engine's last report as snapshots carry it, built once per report rather than once per snapshot
    (a report changes a few times a second, snapshots are asked once per decision). Its active request
    ids only when asked (``SnapshotRequest.request_ids``): a balancer never reads them, and at GPU scale
    they are thousands."""

    def __init__(self) -> None:
        self._by_engine: dict[tuple[str, bool], tuple[EngineStatus, float, common_pb2.EngineStatus]] = {}

    def of(self, record: EngineRecord, request_ids: bool = False) -> common_pb2.EngineStatus:
        status, received_s = record.status, record.received_s
        key = (status.engine_id, request_ids)
        cached = self._by_engine.get(key)
        if cached is not None and cached[0] is status and cached[1] == received_s:
            return cached[2]
        msg = engine_status_to_proto(status if request_ids else dataclasses.replace(status, active_request_ids=()),
                                     received_s)
        self._by_engine[key] = (status, received_s, msg)
        return msg

    def keep_only(self, records: Mapping[str, EngineRecord]) -> None:
        """Forget engines the monitor no longer knows (swept after failing), once they are most of it."""
        if len(self._by_engine) > 2 * len(records) + 2:
            self._by_engine = {key: v for key, v in self._by_engine.items() if key[0] in records}


def snapshot_to_proto(snapshot: ClusterSnapshot, records: Mapping[str, EngineRecord], admit_seq: int,
                      reports: ReportProtos | None = None, request_ids: bool = False) -> monitor_pb2.MonitorSnapshot:
    """The monitor's answer: each engine's report as it came (from ``reports`` when given; its active
    request ids when ``request_ids``), with the snapshot's accounting of it."""
    now_s = snapshot.taken_unix_s
    reports = reports or ReportProtos()
    reports.keep_only(records)
    msg = monitor_pb2.MonitorSnapshot(
        taken_unix_s=now_s, admit_seq=admit_seq, program_model=snapshot.program_model,
        program_start_unix_s=snapshot.program_start_s, remaining_stage_costs_s=snapshot.remaining_stage_costs_s,
        program_service_s=snapshot.program_service_s,
        program_critical_service_s=snapshot.program_critical_service_s,
        program_dispatches=[monitor_pb2.ProgramDispatch(engine_id=engine_id, prompt_tokens=tokens)
                            for engine_id, tokens in snapshot.program_dispatches],
        engines=[engine_load_to_proto(e, records[e.engine_id], now_s, reports, request_ids)
                 for e in snapshot.engines])
    if snapshot.agent_anchor_distance_s is not None:
        msg.agent_anchor_distance_s = snapshot.agent_anchor_distance_s
    if snapshot.agent_expected_s is not None:
        msg.agent_expected_s = snapshot.agent_expected_s
    if snapshot.anchor_distance_median_s is not None:
        msg.anchor_distance_median_s = snapshot.anchor_distance_median_s
    fit = snapshot.agent_tool_gap
    if fit is not None:
        msg.agent_tool_gap.CopyFrom(monitor_pb2.ToolGapFit(mu=fit.mu, sigma=fit.sigma, samples=fit.samples))
    if snapshot.inferred_stages is not None:
        msg.inferred_stages.CopyFrom(stage_inference_to_proto(snapshot.inferred_stages))
    return msg


def engine_load_to_proto(view: EngineView, record: EngineRecord, now_s: float, reports: ReportProtos,
                         request_ids: bool = False) -> monitor_pb2.EngineLoad:
    """One engine's view as the monitor sends it: its report as it came, with the monitor's accounting."""
    return monitor_pb2.EngineLoad(
        status=reports.of(record, request_ids), in_flight_tokens=view.in_flight_tokens,
        in_flight_cost_s=view.in_flight_cost_s, suspended=view.suspended, kv_ledger_tokens=view.kv_ledger_tokens,
        in_flight_requests=view.in_flight_requests, healthy=view.healthy, status_age_s=now_s - record.received_s,
        dispatched_since_report=view.dispatched_since_report, prefix_match_blocks=view.prefix_match_blocks,
        prefix_index_blocks=view.prefix_index_blocks, pending_prefill_tokens=view.pending_prefill_tokens,
        resident_tokens=view.resident_tokens, resident_growth_tokens=view.resident_growth_tokens,
        resident_programs=view.resident_programs,
        in_flight_calls=[in_flight_call_to_proto(c) for c in view.in_flight_calls])


def stage_inference_to_proto(inferred: StageInference) -> common_pb2.StageInference:
    return common_pb2.StageInference(stage_index=inferred.stage_index, stage_count=inferred.stage_count,
                                     runs_seen=inferred.runs_seen)


class ProfileMemo:
    """Each engine's profile as last converted, converted again only when its message changes (a balancer
    reads sixteen or more per decision; they change when an engine restarts)."""

    def __init__(self) -> None:
        self._by_engine: dict[str, tuple[common_pb2.TimingProfile, EngineProfile]] = {}

    def of(self, engine_id: str, msg: common_pb2.TimingProfile) -> EngineProfile:
        cached = self._by_engine.get(engine_id)
        if cached is not None and cached[0] == msg:
            return cached[1]
        kept = common_pb2.TimingProfile()
        kept.CopyFrom(msg)
        profile = profile_from_proto(msg)
        self._by_engine[engine_id] = (kept, profile)
        return profile

    def keep_only(self, engines: Sequence[monitor_pb2.EngineLoad]) -> None:
        """Forget engines this snapshot does not show, once they are most of the memo."""
        if len(self._by_engine) > 2 * len(engines) + 2:
            shown = {e.status.engine_id for e in engines}
            self._by_engine = {e: v for e, v in self._by_engine.items() if e in shown}


def snapshot_from_proto(msg: monitor_pb2.MonitorSnapshot, profiles: ProfileMemo | None = None,
                        engines: tuple[EngineView, ...] | None = None) -> ClusterSnapshot:
    """The snapshot ``msg`` says; with ``engines`` (a balancer's watched views) in place of its own."""
    profiles = profiles or ProfileMemo()
    if engines is None:
        profiles.keep_only(msg.engines)
    return ClusterSnapshot(
        taken_unix_s=msg.taken_unix_s, program_model=msg.program_model,
        program_start_s=msg.program_start_unix_s if msg.HasField("program_start_unix_s") else None,
        agent_anchor_distance_s=msg.agent_anchor_distance_s if msg.HasField("agent_anchor_distance_s") else None,
        agent_expected_s=msg.agent_expected_s if msg.HasField("agent_expected_s") else None,
        anchor_distance_median_s=msg.anchor_distance_median_s if msg.HasField("anchor_distance_median_s") else None,
        remaining_stage_costs_s=tuple(msg.remaining_stage_costs_s), program_service_s=msg.program_service_s,
        agent_tool_gap=(LogNormalFit(msg.agent_tool_gap.mu, msg.agent_tool_gap.sigma, msg.agent_tool_gap.samples)
                        if msg.HasField("agent_tool_gap") else None),
        inferred_stages=(StageInference(msg.inferred_stages.stage_index, msg.inferred_stages.stage_count,
                                        msg.inferred_stages.runs_seen) if msg.HasField("inferred_stages") else None),
        program_critical_service_s=msg.program_critical_service_s,
        program_dispatches=tuple((d.engine_id, d.prompt_tokens) for d in msg.program_dispatches),
        engines=tuple(engine_view_from_proto(e, profiles) for e in msg.engines) if engines is None else engines)


def engine_view_from_proto(e: monitor_pb2.EngineLoad, profiles: ProfileMemo) -> EngineView:
    return EngineView(
        engine_id=e.status.engine_id, model=e.status.model, address=e.status.address, healthy=e.healthy,
        in_flight_tokens=e.in_flight_tokens, in_flight_requests=e.in_flight_requests,
        waiting=e.status.waiting, running=e.status.running, kv_cache_usage=e.status.kv_cache_usage,
        decode_ms_per_token=e.status.profile.decode_ms_per_token,
        max_batch_size=max(1, e.status.profile.max_batch_size),
        kv_capacity_tokens=e.status.profile.kv_capacity_tokens, in_flight_cost_s=e.in_flight_cost_s,
        profile=profiles.of(e.status.engine_id, e.status.profile) if e.status.HasField("profile") else None,
        kv_ledger_tokens=tuple(e.kv_ledger_tokens), suspended=e.suspended,
        dispatched_since_report=e.dispatched_since_report, prefix_match_blocks=e.prefix_match_blocks,
        prefix_index_blocks=e.prefix_index_blocks, pending_prefill_tokens=e.pending_prefill_tokens,
        resident_tokens=e.resident_tokens, resident_growth_tokens=e.resident_growth_tokens,
        resident_programs=e.resident_programs,
        in_flight_calls=tuple(in_flight_call_from_proto(c) for c in e.in_flight_calls))


def feature_row_to_proto(row: FeatureRow) -> predictor_pb2.FeatureRow:
    return predictor_pb2.FeatureRow(
        model=row.model, workflow=row.workflow, agent=row.agent, stage_index=row.stage_index,
        stage_count=row.stage_count, system_prompt_tokens=row.system_prompt_tokens,
        user_prompt_tokens=row.user_prompt_tokens, input_tokens=row.input_tokens, user_prompt=row.user_prompt)


def feature_row_from_proto(msg: predictor_pb2.FeatureRow) -> FeatureRow:
    return FeatureRow(
        model=msg.model, workflow=msg.workflow, agent=msg.agent, stage_index=msg.stage_index,
        stage_count=msg.stage_count, system_prompt_tokens=msg.system_prompt_tokens,
        user_prompt_tokens=msg.user_prompt_tokens, input_tokens=msg.input_tokens, user_prompt=msg.user_prompt)


def prediction_from_proto(msg: predictor_pb2.Prediction, quantiles: Iterable[float]) -> Prediction:
    return Prediction(msg.median_tokens, dict(zip(quantiles, msg.quantile_tokens)))
