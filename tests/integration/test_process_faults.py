"""Faults injected into a stack of real processes, as the reliability benchmark injects them, at small
scale: no call is lost that had not started streaming (issue 14; hetflow/bench/reliability.py)."""

import os
from pathlib import Path

import pytest

from hetflow import stackctl
from hetflow.bench import reliability

pytestmark = pytest.mark.slow
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "local-sim.yaml"


@pytest.mark.parametrize("scenario", ["engine-kill", "engine-stop", "monitor-kill"])
def test_no_call_that_had_not_started_streaming_is_lost(scenario, tmp_path):
    config = reliability.write_stack(EXAMPLE, scenario, max_waiting=32, out_dir=tmp_path)
    assert stackctl.up(config, 240, detach=False) == 0  # as the benchmark starts it
    try:
        supervisor = stackctl.read_state(stackctl.load_stack(config))["supervisor_pid"]
        # beside the load client in its session, so the scheduler weighs both alike (stackctl.up)
        assert os.getsid(supervisor) == os.getsid(0) and os.getpgid(supervisor) == supervisor
        result = reliability.run_fault(scenario, config, rate=6.0, duration_s=15.0, seed=0, stop_s=6.0,
                                       observe_after_s=3.0)  # the report's 20 s of recovery are not asserted
    finally:
        stackctl.down(config)
    assert result["calls"] > 40
    assert result["lost_before_first_token"] == 0, result["codes"]
    refused = result["codes"].get("RESOURCE_EXHAUSTED", 0)  # refused with a retry hint while an engine was gone:
    # the caller is told when to come back, nothing is lost (reliability.Outcome.lost); anything else is
    assert result["ok"] + result["failed_after_first_token"] + refused == result["calls"], result["codes"]
    if scenario == "engine-stop":
        assert result["marked_unhealthy_after_s"] is not None  # the monitor noticed the hung engine
