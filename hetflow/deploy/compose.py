"""``hetflow compose -c STACK.yaml``: the compose file that runs a stack, one container per service.

Each service dials the others by the ``host`` its config section names, so in compose every section's
host is its container's name (the service key here). Health checks ask each service's gRPC health (the
gateway's ``/health``) through ``hetflow health``; ``depends_on`` waits for ``service_healthy``, so the
balancer starts once the monitor, router, predictor and every engine serve, and the gateway once the
balancer does. Engines with ``backend: vllm`` run the engine image (vLLM's official image with hetflow)
on tensor x pipeline parallel size GPUs each (one by default), numbered in config order; every other
service runs the control-plane image.

With a ``security`` section, each container gets the files its own identity reads (the CA, its
certificate and key, the service token; ``hetflow certs`` writes them), read-only, at the path the
config names (a relative path under the image's working directory), and its health check presents
its own certificate: no container holds another service's key.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import yaml

from hetflow.runtime.security import stack_security
from hetflow.supervisor import ServiceProcess, plan, service_section, stop_grace_s

CONTROL_PLANE_IMAGE = "hetflow:latest"
ENGINE_IMAGE = "hetflow-engine:latest"
STACK_IN_CONTAINER = "/etc/hetflow/stack.yaml"
WORKDIR_IN_CONTAINER = "/app"
"""The images' working directory (Dockerfile), where a relative path in the stack config points."""
LOOPBACK = ("127.0.0.1", "0.0.0.0", "localhost", "::", "::1", "")
HF_CACHE_IN_CONTAINER = "/root/.cache/huggingface"
"""Where the engine image's vLLM keeps downloaded weights."""
START_PERIOD_S = {"vllm": 900, "default": 30}
"""How long a container may take to become healthy before failed checks count (vLLM loads weights)."""


def service_host(raw: Mapping[str, Any], svc: ServiceProcess) -> str:
    host = str(service_section(raw, svc).get("host", raw.get("stack", {}).get("host", "")))
    if host in LOOPBACK:
        where = f"engines[{svc.extra_args[-1]}]" if svc.service == "engine" else svc.service
        raise ValueError(f"{where}.host is {host!r}: in compose each section's host must be its container's "
                         "name, which the other services dial (see examples/compose-gpu.yaml)")
    return host


def engine_gpus(section: Mapping[str, Any]) -> int:
    """GPUs a vLLM engine's replica runs on: tensor x pipeline parallel size (default one)."""
    vllm = section.get("vllm") or {}
    return int(vllm.get("tensor_parallel_size", 1)) * int(vllm.get("pipeline_parallel_size", 1))


def secured(raw: Mapping[str, Any]) -> bool:
    return bool(raw.get("security"))


def security_files(raw: Mapping[str, Any], identity: str) -> dict[str, tuple[str, str]]:
    """Role -> (path on the host, path in the container) of each file ``identity`` reads."""
    files = stack_security(raw, identity).files() if secured(raw) else {}
    return {role: (str(p) if p.is_absolute() else f"./{p}",
                   str(p) if p.is_absolute() else f"{WORKDIR_IN_CONTAINER}/{p}") for role, p in files.items()}


def health_command(raw: Mapping[str, Any], svc: ServiceProcess) -> list[str]:
    """``hetflow health`` of the service, over the stack's TLS as the service itself when it has one."""
    secure = ["-c", STACK_IN_CONTAINER, "--identity", svc.service] if secured(raw) else []
    return ["hetflow", "health", svc.address, *secure]


def _healthcheck(raw: Mapping[str, Any], svc: ServiceProcess, start_period_s: int) -> dict[str, Any]:
    return {"test": ["CMD", *health_command(raw, svc)], "interval": "5s", "timeout": "3s", "retries": 5,
            "start_period": f"{start_period_s}s"}


def refuse_vllm_sim(raw: Mapping[str, Any], tool: str) -> None:
    """``vllm_sim`` servers are a benchmark pool run on one host (``hetflow up``); the deployment writers do
    not place them."""
    if raw.get("vllm_sim"):
        raise ValueError(f"{tool}: the stack's vllm_sim servers are a benchmark pool for one host; start them with "
                         "`hetflow up` (docs/vllm-sim.md), and deploy a stack without them")


def compose_file(raw: Mapping[str, Any], stack_file: str) -> dict[str, Any]:
    """The compose document for the stack ``raw``, which the host holds at ``stack_file``."""
    refuse_vllm_sim(raw, "hetflow compose")
    services: dict[str, dict[str, Any]] = {}
    names: dict[str, str] = {}
    gpu = 0
    for svc in plan(raw):
        name = service_host(raw, svc)
        if name in services:
            raise ValueError(f"two services share host {name!r}; each needs its own container name")
        names[svc.name] = name
        backend = service_section(raw, svc).get("backend", "sim") if svc.service == "engine" else ""
        command = [svc.service, "-c", STACK_IN_CONTAINER, *svc.extra_args]
        entry: dict[str, Any] = {
            "image": ENGINE_IMAGE if backend == "vllm" else CONTROL_PLANE_IMAGE,
            "build": {"context": ".", "target": "engine" if backend == "vllm" else "control-plane"},
            "command": command,
            "volumes": [f"{stack_file}:{STACK_IN_CONTAINER}:ro",
                        *(f"{host}:{inside}:ro" for host, inside in security_files(raw, svc.service).values())],
            "healthcheck": _healthcheck(raw, svc, START_PERIOD_S["vllm" if backend == "vllm" else "default"]),
            "restart": "unless-stopped",
            "stop_grace_period": f"{math.ceil(stop_grace_s(raw, svc))}s",
        }
        if backend == "vllm":
            entry["volumes"].append(f"${{HF_HOME:-~/.cache/huggingface}}:{HF_CACHE_IN_CONTAINER}")
            entry["shm_size"] = "8g"
            device_ids = [str(g) for g in range(gpu, gpu + engine_gpus(service_section(raw, svc)))]
            entry["deploy"] = {"resources": {"reservations": {"devices": [
                {"driver": "nvidia", "device_ids": device_ids, "capabilities": ["gpu"]}]}}}
            gpu += len(device_ids)
        services[name] = entry
    _wire_dependencies(raw, services, names)
    return {"name": str(raw.get("stack", {}).get("name", "hetflow")), "services": services}


def _wire_dependencies(raw: Mapping[str, Any], services: dict[str, dict[str, Any]], names: dict[str, str]) -> None:
    def healthy(*names_: str) -> dict[str, dict[str, str]]:
        return {n: {"condition": "service_healthy"} for n in names_}

    engines = [n for key, n in names.items() if key.startswith("engine:")]
    core = [names[s] for s in ("monitor", "router", "predictor") if s in names]
    for engine in engines:
        if "monitor" in names:
            services[engine]["depends_on"] = healthy(names["monitor"])
    balancer = names["balancer"]
    services[balancer]["depends_on"] = healthy(*core, *engines)
    services[balancer]["ports"] = [f"{raw['balancer']['port']}:{raw['balancer']['port']}"]
    if "gateway" in names:
        gateway = names["gateway"]
        services[gateway]["depends_on"] = healthy(balancer, *[names["monitor"]] * ("monitor" in names))
        services[gateway]["ports"] = [f"{raw['gateway']['port']}:{raw['gateway']['port']}"]


HEADER = """\
# Written by `hetflow compose -c {stack_file}`; edit the stack config and write it again.
# `docker compose up --build` (GPU engines need the NVIDIA container toolkit). OpenAI clients use
# http://localhost:<gateway port>/v1; gRPC clients dial the balancer's published port.
"""


def render(raw: Mapping[str, Any], stack_file: str) -> str:
    body = yaml.safe_dump(compose_file(raw, stack_file), sort_keys=False, default_flow_style=None, width=110)
    return HEADER.format(stack_file=stack_file) + body
