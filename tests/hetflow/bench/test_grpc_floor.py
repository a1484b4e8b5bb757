"""The gRPC floor benchmark: an echo server in a process of its own answers every call and stream message
of each phase, and each phase reports both ends' CPU per message."""

from __future__ import annotations

import json
import subprocess
import sys


def test_every_phase_is_answered_and_reports_both_ends_cpu(tmp_path):
    out = tmp_path / "floor.json"
    subprocess.run([sys.executable, "-m", "hetflow.bench.grpc_floor", "--messages", "60", "--payload-bytes", "64",
                    "--in-flight", "4", "--out", str(out)], check=True, timeout=120, capture_output=True)
    result = json.loads(out.read_text())
    assert result["messages"] == 60 and result["payload_bytes"] == 64
    assert list(result["phases"]) == ["unary call", "stream message, one at a time", "stream message, 4 in flight"]
    for figures in result["phases"].values():
        assert figures["per_s"] > 0 and figures["client_us"] > 0 and figures["server_us"] >= 0
