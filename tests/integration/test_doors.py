"""The live harness end to end on one door: a fresh pool of simulated vLLM servers, vLLM's router with
Program scheduling in front, warm-up calls, a short trace replayed in the router's dialect, the row."""

import json

import pytest
import yaml

from hetflow.bench import doors

pytestmark = pytest.mark.slow


def test_a_trace_replays_through_vllms_router_to_a_fresh_pool_and_reports_its_row(tmp_path):
    pool = {"stack": {"name": "doors-test", "host": "127.0.0.1"},
            "vllm_sim": [{"name": f"sim-{i}", "port": 0, "profile": "qwen2.5-1.5b-instruct@a6000", "time_scale": 1.0}
                         for i in range(2)]}
    config = tmp_path / "pool.yaml"
    config.write_text(yaml.safe_dump(pool))
    assert doors.main(["--pool", str(config), "--family", "code", "--programs", "3", "--rate", "2",
                       "--warmup-programs", "2", "--doors", "vllm-router:program", "--out", str(tmp_path / "out"),
                       "--idle-s", "0.5"]) == 0
    [row] = json.loads((tmp_path / "out" / "results.json").read_text())["rows"]
    assert row["door"] == "vllm-router:program" and row["programs"] == 3 and row["failed_programs"] == 0
    assert row["prefix_hit_rate"] > 0  # a program's later calls found its earlier ones' blocks
    assert row["door_cpu_ms_per_call"] is not None  # the router's CPU over the run (in /proc's 10 ms ticks)
    assert row["door_idle_cpu_ms_per_s"] >= 0 and row["door_cpu_ms_per_call_above_idle"] is not None
    assert list(row["door_idle_cpu_ms_per_s_by_process"]) == list(row["door_cpu_ms_per_call_by_process"]) \
        == ["vllm-router"]
    assert (tmp_path / "out" / "vllm-router-program-config.json").exists()  # the calibration beside the results
