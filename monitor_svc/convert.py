"""monitor state <-> protobuf."""

from __future__ import annotations

from hetflow.core.monitor.state import MonitorState, ProgramRecord
from hetflow.v1 import monitor_pb2


def snapshot_to_proto(state: MonitorState, program_id: str, now_s: float, agent: str = ""
                      ) -> monitor_pb2.MonitorSnapshot:
    engines = [
        monitor_pb2.EngineLoad(status=record.status, in_flight_tokens=record.in_flight_tokens,
                               in_flight_cost_s=record.in_flight_cost_s, suspended=record.suspended,
                               kv_ledger_tokens=record.ledger.occupied_window(now_s, state.limits.ledger_horizon_slots),
                               in_flight_requests=len(record.in_flight),
                               healthy=state.is_healthy(record, now_s), status_age_s=now_s - record.received_s)
        for record in state.engines.values()
    ]
    msg = monitor_pb2.MonitorSnapshot(taken_unix_s=now_s, engines=engines, admit_seq=state.admit_seq,
                                      program_model=state.program_model(program_id) if program_id else "",
                                      program_start_unix_s=state.program_start_s(program_id) if program_id else 0.0)
    if agent in state.agent_stats.priorities:
        msg.agent_priority = state.agent_stats.priorities[agent]
    if agent in state.agent_stats.expected_s:
        msg.agent_expected_s = state.agent_stats.expected_s[agent]
    return msg


def program_to_proto(p: ProgramRecord) -> monitor_pb2.ProgramEntry:
    return monitor_pb2.ProgramEntry(
        program_id=p.program_id, model=p.model, workflow=p.workflow, in_flight_requests=len(p.in_flight),
        completed_requests=p.completed, output_tokens=p.output_tokens, deadline_unix_s=p.deadline_unix_s,
        first_seen_unix_s=p.first_seen_s, last_seen_unix_s=p.last_seen_s)
