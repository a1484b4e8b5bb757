"""The monitor's own messages <-> core types (the snapshot converts in hetflow.wire)."""

from __future__ import annotations

from hetflow.core.monitor.state import ProgramRecord
from hetflow.core.room import WorkingSetRoom
from hetflow.v1 import monitor_pb2


def program_to_proto(p: ProgramRecord) -> monitor_pb2.ProgramEntry:
    return monitor_pb2.ProgramEntry(
        program_id=p.program_id, model=p.model, workflow=p.workflow, in_flight_requests=len(p.in_flight),
        completed_requests=p.completed, output_tokens=p.output_tokens, deadline_unix_s=p.deadline_unix_s,
        first_seen_unix_s=p.first_seen_s, last_seen_unix_s=p.last_seen_s)


def working_set_room(request: monitor_pb2.AdmitRequest) -> WorkingSetRoom | None:
    """The working-set room the admit is conditional on; None when it is not."""
    if not request.HasField("within_working_set"):
        return None
    room = request.within_working_set
    return WorkingSetRoom(room.need_tokens, room.limit_tokens, room.growth_share)
