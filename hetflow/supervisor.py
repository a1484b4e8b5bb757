"""Runs a stack's services as child processes, restarts the ones that die, stops them all on SIGTERM.

``hetflow up`` starts this detached and returns once every service reports SERVING; ``hetflow down``
sends it SIGTERM. Order: monitor, router, predictor, engines, balancer, gateway (dependencies first); stop
runs in reverse so the balancer drains before the engines go.
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

from hetflow.runtime.config import load_stack

RUN_DIR = Path(os.environ.get("HETFLOW_CACHE", Path.home() / ".cache" / "hetflow")) / "run"
MAX_RESTARTS = 5
RESTART_WINDOW_S = 60.0
STOP_GRACE_S = 15.0


@dataclass
class ServiceProcess:
    name: str
    service: str
    """The service ``hetflow.serve`` builds."""
    address: str
    """host:port of a gRPC service; http://host:port of an HTTP one (the gateway)."""
    extra_args: list[str] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None
    restarts: list[float] = field(default_factory=list)


def stack_name(raw: Mapping[str, Any]) -> str:
    return str(raw.get("stack", {}).get("name", "hetflow"))


def state_path(name: str) -> Path:
    return RUN_DIR / f"{name}.json"


def plan(raw: Mapping[str, Any]) -> list[ServiceProcess]:
    host = raw.get("stack", {}).get("host", "127.0.0.1")

    def address(section: Mapping[str, Any]) -> str:
        return f"{section.get('host', host)}:{section['port']}"

    services = []
    for name in ("monitor", "router", "predictor"):
        if name in raw:
            services.append(ServiceProcess(name, name, address(raw[name])))
    for engine in raw.get("engines", []):
        services.append(ServiceProcess(f"engine:{engine['name']}", "engine", address(engine),
                                       ["--name", engine["name"]]))
    services.append(ServiceProcess("balancer", "balancer", address(raw["balancer"])))
    if "gateway" in raw:
        services.append(ServiceProcess("gateway", "gateway", f"http://{address(raw['gateway'])}"))
    return services


class Supervisor:
    def __init__(self, config_path: Path) -> None:
        self.config_path = config_path.resolve()
        self.raw = load_stack(self.config_path)
        self.name = stack_name(self.raw)
        self.log_dir = RUN_DIR / self.name
        self.services = plan(self.raw)
        self._stopping = False

    def run(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        signal.signal(signal.SIGTERM, lambda *_: self._request_stop())
        signal.signal(signal.SIGINT, lambda *_: self._request_stop())
        for svc in self.services:
            self._spawn(svc)
        self._write_state()
        while not self._stopping:
            for svc in self.services:
                if svc.process is not None and svc.process.poll() is not None and not self._stopping:
                    self._restart(svc)
            time.sleep(0.5)
        self._stop_all()
        state_path(self.name).unlink(missing_ok=True)

    def _request_stop(self) -> None:
        self._stopping = True

    def _spawn(self, svc: ServiceProcess) -> None:
        log = open(self.log_dir / f"{svc.name.replace(':', '-')}.log", "ab")
        svc.process = subprocess.Popen(
            [sys.executable, "-m", "hetflow.serve", svc.service, "--config", str(self.config_path), *svc.extra_args],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()

    def _restart(self, svc: ServiceProcess) -> None:
        now = time.monotonic()
        svc.restarts = [t for t in svc.restarts if now - t < RESTART_WINDOW_S]
        if len(svc.restarts) >= MAX_RESTARTS:
            if svc.process is not None:
                print(f"{svc.name} exited {MAX_RESTARTS} times in {RESTART_WINDOW_S:.0f}s; giving up on it",
                      file=sys.stderr, flush=True)
            svc.process = None
            self._write_state()
            return
        svc.restarts.append(now)
        time.sleep(min(8.0, 0.5 * 2 ** len(svc.restarts)))
        self._spawn(svc)
        self._write_state()

    def _stop_all(self) -> None:
        for svc in reversed(self.services):
            if svc.process is not None and svc.process.poll() is None:
                svc.process.send_signal(signal.SIGTERM)
                try:
                    svc.process.wait(timeout=STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    svc.process.kill()
                    svc.process.wait()

    def _write_state(self) -> None:
        state = {
            "supervisor_pid": os.getpid(), "config": str(self.config_path), "log_dir": str(self.log_dir),
            "stack": self.raw,
            "services": {s.name: {"address": s.address, "pid": s.process.pid if s.process else None,
                                  "restarts": len(s.restarts)} for s in self.services},
        }
        path = state_path(self.name)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="hetflow.supervisor")
    parser.add_argument("-c", "--config", required=True, type=Path)
    Supervisor(parser.parse_args(argv).config).run()


if __name__ == "__main__":
    main()
