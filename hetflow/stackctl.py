"""Start, stop and inspect a stack run by the supervisor (``hetflow up/down/status``)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from hetflow.runtime.channels import open_channel
from hetflow.runtime.config import load_stack
from hetflow.runtime.security import SecurityConfig, stack_security
from hetflow.supervisor import RUN_DIR, log_tail, plan, stack_name, state_path, stop_grace_s
from hetflow.v1 import monitor_pb2, monitor_pb2_grpc


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def read_state(raw: dict[str, Any]) -> dict[str, Any] | None:
    path = state_path(stack_name(raw))
    if not path.exists():
        return None
    state = json.loads(path.read_text())
    return state if _alive(state.get("supervisor_pid")) else None


def _http_health(url: str, timeout_s: float, security: SecurityConfig) -> str:
    tls = security.tls
    context = ssl.create_default_context(cafile=str(security.path(tls.ca_file))) if tls is not None else None
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout_s, context=context) as reply:
            return "SERVING" if reply.status == 200 else "NOT_SERVING"
    except urllib.error.HTTPError:
        return "NOT_SERVING"
    except OSError:
        return "UNAVAILABLE"


async def health(address: str, timeout_s: float = 1.0, security: SecurityConfig | None = None) -> str:
    """A service's health: gRPC health for host:port, ``GET /health`` for an http(s):// address; over
    TLS as ``security`` says (the operator's certificate)."""
    security = security or SecurityConfig()
    if address.startswith(("http://", "https://")):
        return await asyncio.to_thread(_http_health, address, timeout_s, security)
    async with open_channel(address, security) as channel:
        try:
            reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=timeout_s)
            return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
        except grpc.aio.AioRpcError as exc:
            return exc.code().name


async def healths(addresses: dict[str, str], security: SecurityConfig | None = None) -> dict[str, str]:
    """Each named service's health, asked together."""
    return dict(zip(addresses, await asyncio.gather(*(health(a, security=security) for a in addresses.values()))))


async def wait_serving(addresses: dict[str, str], timeout_s: float, supervisor_pid: int | None = None,
                       exited: Callable[[], list[str]] | None = None,
                       security: SecurityConfig | None = None) -> dict[str, str]:
    """Until every service answers SERVING; stops early when the supervisor dies or ``exited`` names
    a service that has exited (a service that fails at start fails again when restarted)."""
    deadline = time.monotonic() + timeout_s
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        states = await healths(addresses, security)
        if all(s == "SERVING" for s in states.values()):
            return states
        if supervisor_pid is not None and not _alive(supervisor_pid):
            break
        if exited is not None and exited():
            break
        await asyncio.sleep(0.5)
    return states


def exited_services(name: str) -> list[str]:
    """Services of the running stack ``name`` that have exited at least once (the supervisor's record)."""
    path = state_path(name)
    try:
        services = json.loads(path.read_text())["services"]
    except (OSError, ValueError, KeyError):
        return []
    return [svc for svc, s in services.items() if s.get("restarts") or s.get("pid") is None]


async def wait_engines_registered(monitor_address: str, engine_ids: set[str], timeout_s: float,
                                  security: SecurityConfig | None = None) -> bool:
    """Until the monitor has a healthy status report from every engine, so the balancer can route."""
    deadline = time.monotonic() + timeout_s
    async with open_channel(monitor_address, security) as channel:
        stub = monitor_pb2_grpc.MonitorStub(channel)
        while time.monotonic() < deadline:
            try:
                snap = await stub.Snapshot(monitor_pb2.SnapshotRequest(), timeout=1.0)
                if engine_ids <= {e.status.engine_id for e in snap.engines if e.healthy}:
                    return True
            except grpc.aio.AioRpcError:
                pass
            await asyncio.sleep(0.2)
    return False


def up(config: Path, timeout_s: float, detach: bool = True) -> int:
    """Start the stack's supervisor and wait until every service serves; 0 when it does.

    ``detach``: the supervisor leads a session of its own, as a daemon does, so it outlives the terminal;
    Linux's autogroup scheduler (``/proc/sys/kernel/sched_autogroup_enabled``) then gives its processes a
    CPU share apart from the caller's. A benchmark that sets the stack beside processes it starts itself
    (a vLLM server, a rival router) passes ``detach=False``: the supervisor gets its own process group in
    the caller's session, so the scheduler weighs its processes as it weighs the others.
    """
    raw = load_stack(config)
    name = stack_name(raw)
    running = read_state(raw)
    if running:
        return _already_up(name, running)
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    log_path = RUN_DIR / f"{name}.supervisor.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "hetflow.supervisor", "-c", str(config.resolve())],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                **({"start_new_session": True} if detach else {"process_group": 0}))
    addresses = {s.name: s.address for s in plan(raw)}
    started = time.monotonic()
    operator = stack_security(raw, "operator")
    states = asyncio.run(wait_serving(addresses, timeout_s, proc.pid, lambda: exited_services(name), operator))
    engine_ids = {e["name"] for e in raw.get("engines", [])}
    if (states and all(s == "SERVING" for s in states.values())
            and ("monitor" not in addresses  # a pool of vllm-sim servers alone: nothing registers
                 or asyncio.run(wait_engines_registered(addresses["monitor"], engine_ids,
                                                        timeout_s - (time.monotonic() - started), operator)))):
        print(f"stack {name!r} is up: " + ", ".join(f"{n}@{a}" for n, a in addresses.items()))
        return 0
    failed = exited_services(name)
    if failed:
        for svc in failed:
            print(f"{svc} exited:\n    {log_tail(RUN_DIR / name / (svc.replace(':', '-') + '.log'))}", file=sys.stderr)
    else:
        print(f"stack {name!r} did not come up within {timeout_s:.0f}s: {states}", file=sys.stderr)
    print(f"logs: {RUN_DIR / name}", file=sys.stderr)
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    return 1


def _already_up(name: str, running: dict[str, Any]) -> int:
    """``up`` on a stack already running: 0 when every service serves, else each one that does not,
    with how it last died, and 1."""
    services = running.get("services", {})
    states = asyncio.run(healths({n: s["address"] for n, s in services.items()},
                                 stack_security(running.get("stack", {}), "operator")))
    failing = {n: state for n, state in states.items() if state != "SERVING"}
    if not failing:
        print(f"stack {name!r} is already up")
        return 0
    print(f"stack {name!r} is up, but not all of it:", file=sys.stderr)
    for svc, state in failing.items():
        record = services[svc]
        restarting = "" if record.get("running", True) else " (waiting to restart)"
        print(f"  {svc}: {state}{restarting}; last exit: {record.get('last_exit') or 'none'}", file=sys.stderr)
    print(f"logs: {running.get('log_dir', RUN_DIR / name)}", file=sys.stderr)
    return 1


DOWN_MARGIN_S = 10.0
"""What the supervisor's own exit may take after its services' stops, in ``down``'s wait."""


def down(config: Path, timeout_s: float | None = None) -> int:
    """Stop the stack ``up`` started from ``config``: its supervisor stops each service in turn, each
    within ``stop_grace_s``; ``timeout_s`` (None: the sum of those) bounds the wait."""
    raw = load_stack(config)
    state = read_state(raw)
    if state is None:
        print(f"stack {stack_name(raw)!r} is not running")
        return 0
    running = state.get("stack", raw)
    if timeout_s is None:
        timeout_s = sum(stop_grace_s(running, svc) for svc in plan(running)) + DOWN_MARGIN_S
    pid = state["supervisor_pid"]
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
        try:
            os.waitpid(pid, os.WNOHANG)  # reap when it is our child
        except ChildProcessError:
            pass
    if _alive(pid):
        print(f"supervisor {pid} did not stop within {timeout_s:.0f}s", file=sys.stderr)
        return 1
    print(f"stack {stack_name(raw)!r} stopped")
    return 0


async def _status_rows(raw: dict[str, Any]) -> tuple[dict[str, str], monitor_pb2.MonitorSnapshot | None]:
    services = {s.name: s.address for s in plan(raw)}
    operator = stack_security(raw, "operator")
    states = await healths(services, operator)
    snapshot = None
    if "monitor" in services and states.get("monitor") == "SERVING":
        async with open_channel(services["monitor"], operator) as channel:
            snapshot = await monitor_pb2_grpc.MonitorStub(channel).Snapshot(monitor_pb2.SnapshotRequest(), timeout=2)
    return states, snapshot


def status(config: Path) -> int:
    """Health and load of the stack ``up`` started from ``config``: its addresses as ``up`` resolved
    them (environment overrides included), or the config's own when none is running."""
    raw = load_stack(config)
    running = read_state(raw)
    if running is not None and "stack" in running:
        raw = running["stack"]
    states, snapshot = asyncio.run(_status_rows(raw))
    addresses = {s.name: s.address for s in plan(raw)}
    print(f"{'service':<18} {'address':<22} health")
    for name, state in states.items():
        print(f"{name:<18} {addresses[name]:<22} {state}")
    if snapshot is not None:
        print(f"\n{'engine':<12} {'model':<24} {'healthy':<8} {'waiting':>7} {'running':>7} {'kv%':>6} "
              f"{'in-flight tok':>13} {'req':>5}")
        for e in snapshot.engines:
            print(f"{e.status.engine_id:<12} {e.status.model:<24} {str(e.healthy):<8} {e.status.waiting:>7} "
                  f"{e.status.running:>7} {100 * e.status.kv_cache_usage:>6.1f} {e.in_flight_tokens:>13.0f} "
                  f"{e.in_flight_requests:>5}")
    return 0 if states and all(s == "SERVING" for s in states.values()) else 1
