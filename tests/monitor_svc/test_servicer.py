"""The monitor's servicer passes the balancer's KV hold to its state, and leaves it unset when none came."""

from hetflow.core.monitor.state import EngineStatus, MonitorLimits, MonitorState
from hetflow.v1 import monitor_pb2
from monitor_svc.servicer import MonitorServicer


async def test_an_admit_carries_the_kv_hold_only_when_the_balancer_decided_one():
    state = MonitorState(MonitorLimits())
    state.report(EngineStatus("e0", model="m"), 0.0)
    servicer = MonitorServicer(state)
    await servicer.Admit(monitor_pb2.AdmitRequest(request_id="held", program_id="p", model="m", engine_id="e0",
                                                  retain_kv_s=2.5), None)
    await servicer.Admit(monitor_pb2.AdmitRequest(request_id="zero", program_id="q", model="m", engine_id="e0",
                                                  retain_kv_s=0.0), None)
    await servicer.Admit(monitor_pb2.AdmitRequest(request_id="none", program_id="r", model="m", engine_id="e0"),
                         None)
    assert [state.entries[r].retain_kv_s for r in ("held", "zero", "none")] == [2.5, 0.0, None]
