"""Runs a stack's services as child processes, restarts the ones that die, stops them all on SIGTERM.

A service that dies is started again after a backoff that doubles with each death in the last
``RESTART_WINDOW_S`` (0.5 s, 1 s, 2 s ... up to ``MAX_BACKOFF_S``); the supervisor never gives up on
one, and each wait on one service leaves the others watched. Every death is logged with the end of
the service's own log (the cause: a port in use, a bad setting), and the state file keeps it for
``hetflow up`` and ``hetflow status``.

``hetflow up`` starts this detached and returns once every service reports SERVING; ``hetflow down``
sends it SIGTERM. SIGHUP re-reads the config (``hetflow replan --apply`` sends it after each step): engines
it names anew start, engines it no longer names stop (drained as at ``down``), and the balancer is told
(SIGHUP) to take its new cascade; other changes need a restart, and the supervisor says so.
Order: vLLM-compatible simulated servers (``vllm_sim``, what ``vllm-server`` engines front), monitor,
router, predictor, engines, balancer, gateway (dependencies first); stop runs in reverse so the
balancer drains before the engines go. A stack of ``vllm_sim`` servers alone is a pool for any router.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from hetflow.runtime.config import engine_section, load_stack, serve_fields
from hetflow.runtime.security import stack_security
from hetflow.runtime.server import STREAMING_GRACE_S, ServeConfig, stop_within_s

RUN_DIR = Path(os.environ.get("HETFLOW_RUN_DIR")
               or Path(os.environ.get("HETFLOW_CACHE", Path.home() / ".cache" / "hetflow")) / "run")
"""Stacks' state files and logs, by stack name: ``HETFLOW_RUN_DIR``, else ``run`` under ``HETFLOW_CACHE``."""
RESTART_WINDOW_S = 60.0
MAX_BACKOFF_S = 30.0
STREAMING_SERVICES = ("engine", "gateway")
"""The services whose ``grace_s`` defaults to ``STREAMING_GRACE_S``."""


@dataclass
class ServiceProcess:
    name: str
    service: str
    """The service ``hetflow.serve`` builds."""
    address: str
    """host:port of a gRPC service; http://host:port of an HTTP one (the gateway, vllm-sim servers)."""
    extra_args: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None
    restarts: list[float] = field(default_factory=list)
    """When it died, within the last ``RESTART_WINDOW_S`` (monotonic s)."""
    start_at_s: float | None = None
    """When to start it again (monotonic s); None while it runs."""
    last_exit: str = ""
    """How it last died, with the end of its log."""


def stack_name(raw: Mapping[str, Any]) -> str:
    return str(raw.get("stack", {}).get("name", "hetflow"))


def state_path(name: str) -> Path:
    return RUN_DIR / f"{name}.json"


def service_section(raw: Mapping[str, Any], svc: ServiceProcess) -> dict[str, Any]:
    if svc.service == "engine":
        return engine_section(raw, svc.extra_args[-1])
    if svc.service == "vllm-sim":
        return next(dict(s) for s in raw["vllm_sim"] if s["name"] == svc.extra_args[-1])
    return dict(raw[svc.service])


def stop_grace_s(raw: Mapping[str, Any], svc: ServiceProcess) -> float:
    """How long ``svc`` may take to stop on SIGTERM (``hetflow.runtime.server.stop_within_s``), from its
    section's ``grace_s`` and ``not_serving_s`` (flat or under ``serve``)."""
    serve = serve_fields(service_section(raw, svc))   # a copy: the section is left as it is
    return stop_within_s(serve, STREAMING_GRACE_S if svc.service in STREAMING_SERVICES else ServeConfig.grace_s)


def plan(raw: Mapping[str, Any]) -> list[ServiceProcess]:
    host = raw.get("stack", {}).get("host", "127.0.0.1")

    def address(section: Mapping[str, Any]) -> str:
        return f"{section.get('host', host)}:{section['port']}"

    services = [ServiceProcess(f"vllm-sim:{server['name']}", "vllm-sim", f"http://{address(server)}",
                               ["--name", server["name"]]) for server in raw.get("vllm_sim", [])]
    for name in ("monitor", "router", "predictor"):
        if name in raw:
            services.append(ServiceProcess(name, name, address(raw[name])))
    for engine in raw.get("engines", []):
        services.append(ServiceProcess(f"engine:{engine['name']}", "engine", address(engine),
                                       ["--name", engine["name"]]))
    if "balancer" in raw:
        services.append(ServiceProcess("balancer", "balancer", address(raw["balancer"])))
    if "gateway" in raw:
        scheme = "https" if stack_security(raw, "gateway").tls is not None else "http"
        services.append(ServiceProcess("gateway", "gateway", f"{scheme}://{address(raw['gateway'])}"))
    return services


class Supervisor:
    def __init__(self, config_path: Path) -> None:
        self.config_path = config_path.resolve()
        self.raw = load_stack(self.config_path)
        self.name = stack_name(self.raw)
        self.log_dir = RUN_DIR / self.name
        self.services = plan(self.raw)
        self._stopping = False
        self._reload = False

    def run(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        signal.signal(signal.SIGTERM, lambda *_: self._request_stop())
        signal.signal(signal.SIGINT, lambda *_: self._request_stop())
        signal.signal(signal.SIGHUP, lambda *_: setattr(self, "_reload", True))
        for svc in self.services:
            self._spawn(svc)
        self._write_state()
        while not self._stopping:
            if self._reload:
                self._reload = False
                self._reload_config()
            now_s = time.monotonic()
            for svc in self.services:
                if svc.start_at_s is None and svc.process is not None and svc.process.poll() is not None:
                    self._died(svc, now_s)
                elif svc.start_at_s is not None and now_s >= svc.start_at_s:
                    svc.start_at_s = None
                    self._spawn(svc)
                    self._write_state()
            time.sleep(0.2)
        self._stop_all()
        state_path(self.name).unlink(missing_ok=True)

    def _request_stop(self) -> None:
        self._stopping = True

    def _reload_config(self) -> None:
        """Start the engines the config names anew, stop those it no longer names, pass the balancer its
        new section (module docstring)."""
        try:
            raw = load_stack(self.config_path)
        except ValueError as exc:
            print(f"reload refused, the config is not valid: {exc}", file=sys.stderr, flush=True)
            return
        wanted = {svc.name: svc for svc in plan(raw)}
        current = {svc.name: svc for svc in self.services}
        for name in [n for n in current if n not in wanted]:
            self._stop(current[name])
        for name, svc in wanted.items():
            if name not in current:
                self._spawn(svc)
        changed = self._needing_restart(raw, [n for n in wanted if n in current])
        if changed:
            print(f"reload: {changed} changed and need a restart (hetflow down, then up); until then the running "
                  "services keep their settings", file=sys.stderr, flush=True)
        balancer = current.get("balancer")
        if raw.get("balancer") != self.raw.get("balancer") and balancer and balancer.process:
            balancer.process.send_signal(signal.SIGHUP)
        self.services = [current.get(name, svc) for name, svc in wanted.items()]
        self.raw = raw
        self._write_state()

    def _needing_restart(self, raw: Mapping[str, Any], kept: list[str]) -> list[str]:
        """What changed that a reload does not apply: any section but the engines and the balancer; an
        engine kept under its name with other settings; the balancer's settings but its ``cascade``
        (which its SIGHUP applies)."""
        changed = [k for k in raw if k not in ("engines", "balancer") and raw.get(k) != self.raw.get(k)]
        old = {svc.name: svc for svc in plan(self.raw)}
        new = {svc.name: svc for svc in plan(raw)}
        changed += [name for name in kept if name.startswith("engine:")
                    and service_section(raw, new[name]) != service_section(self.raw, old[name])]
        balancer_then, balancer_now = dict(self.raw.get("balancer") or {}), dict(raw.get("balancer") or {})
        balancer_then.pop("cascade", None), balancer_now.pop("cascade", None)
        return changed + (["balancer"] if balancer_then != balancer_now else [])

    def _spawn(self, svc: ServiceProcess) -> None:
        log = open(self._log_file(svc), "ab")
        svc.process = subprocess.Popen(
            [sys.executable, "-m", "hetflow.serve", svc.service, "--config", str(self.config_path), *svc.extra_args],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()

    def _died(self, svc: ServiceProcess, now_s: float) -> None:
        """Schedule its restart after the backoff its recent deaths earn, and say why it died."""
        assert svc.process is not None
        svc.restarts = [t for t in svc.restarts if now_s - t < RESTART_WINDOW_S] + [now_s]
        backoff_s = min(MAX_BACKOFF_S, 0.5 * 2 ** (len(svc.restarts) - 1))
        svc.start_at_s = now_s + backoff_s
        svc.last_exit = f"exit code {svc.process.returncode}: {log_tail(self._log_file(svc))}"
        print(f"{svc.name} died ({svc.last_exit}); restarting in {backoff_s:g}s", file=sys.stderr, flush=True)
        self._write_state()

    def _log_file(self, svc: ServiceProcess) -> Path:
        return self.log_dir / f"{svc.name.replace(':', '-')}.log"

    def _stop_all(self) -> None:
        for svc in reversed(self.services):
            self._stop(svc)

    def _stop(self, svc: ServiceProcess) -> None:
        """SIGTERM (the service drains), then SIGKILL after ``stop_grace_s``."""
        if svc.process is not None and svc.process.poll() is None:
            svc.process.send_signal(signal.SIGTERM)
            try:
                svc.process.wait(timeout=stop_grace_s(self.raw, svc))
            except subprocess.TimeoutExpired:
                svc.process.kill()
                svc.process.wait()

    def _write_state(self) -> None:
        state = {
            "supervisor_pid": os.getpid(), "config": str(self.config_path), "log_dir": str(self.log_dir),
            "stack": self.raw,
            "services": {s.name: {"address": s.address, "pid": s.process.pid if s.process else None,
                                  "restarts": len(s.restarts), "running": s.start_at_s is None,
                                  "last_exit": s.last_exit} for s in self.services},
        }
        path = state_path(self.name)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(path)


def log_tail(log_file: Path, lines: int = 3) -> str:
    """The last lines of a service's log that say why it stopped (its errors first)."""
    try:
        text = log_file.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    errors = [line for line in text if "error" in line.lower()]
    return "\n    ".join((errors or [line for line in text if line.strip()])[-lines:]) or "(empty log)"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="hetflow.supervisor")
    parser.add_argument("-c", "--config", required=True, type=Path)
    Supervisor(parser.parse_args(argv).config).run()


if __name__ == "__main__":
    main()
