"""Services as real processes: `hetflow up/status/run-workflow/down`, SIGTERM shutdown, /metrics."""

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import yaml

from tests.factories import free_port

REPO = Path(__file__).resolve().parents[2]


def hetflow(*args: str, env: dict | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hetflow.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def test_example_sim_stack_up_run_status_down(tmp_path):
    env = {"HETFLOW_CACHE": str(tmp_path)}
    config = REPO / "examples" / "local-sim.yaml"
    up = hetflow("up", "-c", str(config), env=env)
    try:
        assert up.returncode == 0, up.stderr
        assert "is up" in up.stdout
        run = hetflow("run-workflow", "-c", str(config), "--count", "4", "--rate", "20", env=env)
        assert run.returncode == 0, run.stderr
        assert "4 workflows" in run.stdout and "program-affinity" in run.stdout
        chat = _post_json("http://127.0.0.1:8000/v1/chat/completions", {
            "model": "hetflow", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "ignore_eos": True})
        assert chat["usage"]["completion_tokens"] == 3 and chat["hetflow"]["engine_id"]
        status = hetflow("status", "-c", str(config), env=env)
        assert status.returncode == 0, status.stdout + status.stderr
        for name in ("monitor", "router", "predictor", "balancer", "engine:small-0", "engine:large-0", "gateway"):
            assert name in status.stdout
        assert status.stdout.count("SERVING") == 8
    finally:
        down = hetflow("down", "-c", str(config), env=env)
    assert down.returncode == 0 and "stopped" in down.stdout
    assert hetflow("status", "-c", str(config), env=env).returncode == 1   # nothing answers any more


def _post_json(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        return json.loads(reply.read())


def test_service_serves_metrics_and_stops_cleanly_on_sigterm(tmp_path):
    port, metrics_port = free_port(), free_port()
    config = tmp_path / "stack.yaml"
    config.write_text(yaml.safe_dump({"monitor": {"port": port, "metrics_port": metrics_port}}))
    proc = subprocess.Popen([sys.executable, "-m", "hetflow.cli", "serve", "monitor", "-c", str(config)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert hetflow_status_serving(f"127.0.0.1:{port}")
        body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
        # the health checks above went through the service's interceptor and were counted
        assert 'hetflow_rpc_handled_total{code="OK",method="Check",service="monitor"}' in body
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert '"event": "shutting_down"' in stderr and '"event": "stopped"' in stderr
    assert '"service": "monitor"' in stderr


def hetflow_status_serving(address: str, timeout_s: float = 30) -> bool:
    import asyncio

    from hetflow.stackctl import wait_serving

    return asyncio.run(wait_serving({"svc": address}, timeout_s)) == {"svc": "SERVING"}


def test_up_stops_waiting_when_a_service_exits_and_prints_why(tmp_path):
    config = tmp_path / "stack.yaml"
    config.write_text(yaml.safe_dump({
        "stack": {"name": "broken"}, "monitor": {"port": free_port()},
        "balancer": {"port": free_port(), "latency_slak": 1},
        "engines": [{"name": "e0", "port": free_port(), "profile": "qwen2.5-1.5b-instruct@a6000"}]}))
    env = {"HETFLOW_CACHE": str(tmp_path)}
    up = hetflow("up", "-c", str(config), "--timeout", "200", env=env)
    assert up.returncode == 1
    assert "balancer exited" in up.stderr and "unknown setting(s) ['latency_slak']" in up.stderr
    assert hetflow("status", "-c", str(config), env=env).returncode == 1  # up stopped what it started


def test_a_user_error_is_one_line_not_a_traceback(tmp_path):
    config = tmp_path / "stack.yaml"
    config.write_text("monitr: {port: 1}\n")
    out = hetflow("status", "-c", str(config))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "unknown section(s) 'monitr' (did you mean 'monitor'?)" in out.stderr
