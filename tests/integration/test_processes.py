"""Services as real processes: `hetflow up/status/run-workflow/down`, SIGTERM shutdown, /metrics."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

from tests.factories import free_port, stack_on_free_ports

REPO = Path(__file__).resolve().parents[2]


def hetflow(*args: str, env: dict | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hetflow.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def test_example_sim_stack_up_run_status_down(tmp_path):
    env = {"HETFLOW_CACHE": str(tmp_path), "HETFLOW_RUN_DIR": str(tmp_path / "run")}
    config, raw = stack_on_free_ports(REPO / "examples" / "local-sim.yaml", tmp_path)
    up = hetflow("up", "-c", str(config), env=env)
    try:
        assert up.returncode == 0, up.stderr
        assert "is up" in up.stdout
        supervisor = _supervisor_pid(raw, env)
        assert os.getsid(supervisor) == supervisor  # `hetflow up` detaches: a session of its own
        run = hetflow("run-workflow", "-c", str(config), "--count", "4", "--rate", "20", env=env)
        assert run.returncode == 0, run.stderr
        assert "4 workflows" in run.stdout and "program-affinity" in run.stdout
        chat = _post_json(f"http://127.0.0.1:{raw['gateway']['port']}/v1/chat/completions", {
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


def _supervisor_pid(raw: dict, env: dict) -> int:
    from hetflow import stackctl

    return int(json.loads((Path(env["HETFLOW_RUN_DIR"]) / f"{stackctl.stack_name(raw)}.json").read_text())[
        "supervisor_pid"])


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
    env = {"HETFLOW_CACHE": str(tmp_path), "HETFLOW_RUN_DIR": str(tmp_path / "run")}
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


def _service_record(tmp_path, stack: str, service: str) -> dict:
    return json.loads((tmp_path / "run" / f"{stack}.json").read_text())["services"][service]


def _until(check, give_up_s: float = 60.0) -> bool:
    end = time.monotonic() + give_up_s  # a bound on waiting, not a timing under test
    while not (held := bool(check())) and time.monotonic() < end:
        time.sleep(0.2)
    return held


def _bound(sock: socket.socket, port: int) -> bool:
    try:
        sock.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False


def test_the_supervisor_restarts_a_killed_service_and_up_says_when_one_cannot_start(tmp_path):
    monitor_port = free_port()
    config = tmp_path / "stack.yaml"
    config.write_text(yaml.safe_dump({
        "stack": {"name": "restarts"}, "monitor": {"port": monitor_port}, "balancer": {"port": free_port()},
        "engines": [{"name": "e0", "port": free_port(), "profile": "qwen2.5-1.5b-instruct@a6000"}]}))
    env = {"HETFLOW_CACHE": str(tmp_path), "HETFLOW_RUN_DIR": str(tmp_path / "run")}
    assert hetflow("up", "-c", str(config), env=env).returncode == 0
    try:
        first_pid = _service_record(tmp_path, "restarts", "monitor")["pid"]
        os.kill(first_pid, signal.SIGKILL)
        assert _until(lambda: _service_record(tmp_path, "restarts", "monitor")["pid"] != first_pid
                      and hetflow_status_serving(f"127.0.0.1:{monitor_port}", 1))
        assert _service_record(tmp_path, "restarts", "monitor")["restarts"] == 1

        # a process started by hand now holds the monitor's port: its restarts fail, and up says why
        os.kill(_service_record(tmp_path, "restarts", "monitor")["pid"], signal.SIGKILL)
        squatter = socket.socket()
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past the killed monitor's TIME_WAITs
        assert _until(lambda: _bound(squatter, monitor_port))  # once the killed monitor's socket is gone
        squatter.listen()
        try:
            assert _until(lambda: "bind" in _service_record(tmp_path, "restarts", "monitor")["last_exit"])
            up = hetflow("up", "-c", str(config), env=env)
            assert up.returncode == 1 and "monitor" in up.stderr and "bind" in up.stderr
        finally:
            squatter.close()
        # the supervisor never gave up: once the port is free the monitor comes back
        assert _until(lambda: hetflow_status_serving(f"127.0.0.1:{monitor_port}", 1))
        assert hetflow("up", "-c", str(config), env=env).returncode == 0
    finally:
        hetflow("down", "-c", str(config), env=env)


def test_a_stack_with_mutual_tls_and_api_keys_comes_up_and_serves_only_holders_of_a_key(tmp_path):
    from hetflow.deploy.certs import security_section
    from hetflow.runtime.security import key_digest

    raw = yaml.safe_load((REPO / "examples" / "local-sim.yaml").read_text())
    raw["stack"]["name"] = "mtls-test"
    for name in ("monitor", "router", "predictor", "balancer", "gateway"):
        raw[name].update(port=free_port(), metrics_port=0)
    raw["engines"] = [{**e, "port": free_port(), "metrics_port": 0} for e in raw["engines"] if e["name"] != "small-1"]
    certs = tmp_path / "certs"
    config = tmp_path / "stack.yaml"
    config.write_text(yaml.safe_dump(raw))
    assert hetflow("certs", "-c", str(config), "-o", str(certs)).returncode == 0
    raw["security"] = {**security_section(certs), "api_keys": {key_digest("key-a"): "team-a"}}
    config.write_text(yaml.safe_dump(raw))
    env = {"HETFLOW_CACHE": str(tmp_path), "HETFLOW_RUN_DIR": str(tmp_path / "run")}
    up = hetflow("up", "-c", str(config), env=env)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        status = hetflow("status", "-c", str(config), env=env)
        assert status.returncode == 0 and status.stdout.count("SERVING") == 7, status.stdout + status.stderr
        monitor = f"127.0.0.1:{raw['monitor']['port']}"
        assert hetflow("health", monitor, "-c", str(config)).returncode == 0
        assert hetflow("health", monitor).returncode == 1  # plaintext to a TLS port
        run = hetflow("run-workflow", "-c", str(config), "--count", "1", env={**env, "HETFLOW_API_KEY": "key-a"})
        assert run.returncode == 0 and "1 workflows" in run.stdout, run.stderr
        refused = hetflow("run-workflow", "-c", str(config), "--count", "1", env=env)
        assert refused.returncode != 0 and "UNAUTHENTICATED" in refused.stderr
    finally:
        down = hetflow("down", "-c", str(config), env=env)
    assert down.returncode == 0
