"""``hetflow kube -c STACK.yaml -o DIR``: kustomize manifests that run a stack on Kubernetes.

One Deployment and one Service per hetflow service and per engine, named by the host its config
section gives (the name the other services dial, as in compose). Each pod binds all interfaces (an
environment override of its own section's ``host``, which only that pod reads) while the others dial
its Service. The stack config travels as a ConfigMap from kustomize's ``configMapGenerator``, so a
changed config rolls the pods. Probes ask gRPC health (the gateway's ``/health``); pods carry the
Prometheus scrape annotations of their metrics port; engines with ``backend: vllm`` ask one GPU. One
Deployment per configured engine: the monitor tracks engines by name, so more replicas of a model are
more engine entries in the stack config.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import yaml

from hetflow.deploy.compose import CONTROL_PLANE_IMAGE, ENGINE_IMAGE, STACK_IN_CONTAINER, service_host, service_section
from hetflow.runtime.config import env_key
from hetflow.supervisor import ServiceProcess, plan

CONFIG_MAP = "hetflow-stack"
LABEL = "app.kubernetes.io/name"


def _env_section(svc: ServiceProcess) -> str:
    return f"ENGINES__{env_key(svc.extra_args[-1])}" if svc.service == "engine" else svc.service.upper()


def _probes(svc: ServiceProcess, port: int, initial_delay_s: int) -> dict[str, Any]:
    check: dict[str, Any] = ({"httpGet": {"path": "/health", "port": port}} if svc.service == "gateway"
                             else {"grpc": {"port": port}})
    return {"readinessProbe": {**check, "periodSeconds": 5, "failureThreshold": 3},
            "livenessProbe": {**check, "periodSeconds": 10, "failureThreshold": 6},
            "startupProbe": {**check, "periodSeconds": 5, "failureThreshold": max(1, initial_delay_s // 5)}}


def _env(name: str, svc: ServiceProcess, port: int) -> list[dict[str, str]]:
    """The pod binds every interface; an engine tells the monitor its Service, where the balancer dials it."""
    env = [{"name": f"HETFLOW__{_env_section(svc)}__HOST", "value": "0.0.0.0"}]
    if svc.service == "engine":
        env.append({"name": f"HETFLOW__{_env_section(svc)}__ADVERTISE_ADDRESS", "value": f"{name}:{port}"})
    return env


def _container(name: str, svc: ServiceProcess, section: Mapping[str, Any], vllm: bool) -> dict[str, Any]:
    port = int(section["port"])
    ports = [{"name": "http" if svc.service == "gateway" else "grpc", "containerPort": port}]
    if section.get("metrics_port"):
        ports.append({"name": "metrics", "containerPort": int(section["metrics_port"])})
    container: dict[str, Any] = {
        "name": svc.service,
        "image": ENGINE_IMAGE if vllm else CONTROL_PLANE_IMAGE,
        "args": [svc.service, "-c", STACK_IN_CONTAINER, *svc.extra_args],
        "env": _env(name, svc, port),
        "ports": ports,
        "volumeMounts": [{"name": "stack", "mountPath": str(Path(STACK_IN_CONTAINER).parent), "readOnly": True}],
        **_probes(svc, port, 900 if vllm else 60),
    }
    if vllm:
        container["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    return container


def _deployment(name: str, svc: ServiceProcess, section: Mapping[str, Any], vllm: bool) -> dict[str, Any]:
    annotations = ({"prometheus.io/scrape": "true", "prometheus.io/port": str(section["metrics_port"]),
                    "prometheus.io/path": "/metrics"} if section.get("metrics_port")
                   else {"prometheus.io/scrape": "true", "prometheus.io/port": str(section["port"]),
                         "prometheus.io/path": "/metrics"} if svc.service == "gateway" else {})
    labels = {LABEL: name, "app.kubernetes.io/part-of": "hetflow", "app.kubernetes.io/component": svc.service}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {LABEL: name}},
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": {"containers": [_container(name, svc, section, vllm)],
                         "terminationGracePeriodSeconds": 30,
                         "volumes": [{"name": "stack", "configMap": {"name": CONFIG_MAP}}]},
            },
        },
    }


def _service(name: str, svc: ServiceProcess, section: Mapping[str, Any]) -> dict[str, Any]:
    ports = [{"name": "http" if svc.service == "gateway" else "grpc", "port": int(section["port"]),
              "targetPort": int(section["port"])}]
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": {LABEL: name}},
            "spec": {"selector": {LABEL: name}, "ports": ports}}


def manifests(raw: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """File name -> the resources it holds, one file per service."""
    files: dict[str, list[dict[str, Any]]] = {}
    for svc in plan(raw):
        section = service_section(raw, svc)
        name = service_host(raw, svc)
        vllm = svc.service == "engine" and section.get("backend", "sim") == "vllm"
        files[f"{name}.yaml"] = [_deployment(name, svc, section, vllm), _service(name, svc, section)]
    return files


def kustomization(files: list[str]) -> dict[str, Any]:
    return {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "labels": [{"pairs": {"app.kubernetes.io/part-of": "hetflow"}}],
            "resources": files,
            "configMapGenerator": [{"name": CONFIG_MAP, "files": ["stack.yaml"]}]}


HEADER = "# Written by `hetflow kube -c {stack_file}`; edit the stack config and write it again.\n"


def write(raw: Mapping[str, Any], stack_text: str, stack_file: str, out_dir: Path) -> list[Path]:
    """Write the manifests, the kustomization and the stack config into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    files = manifests(raw)
    for file_name, resources in files.items():
        path = out_dir / file_name
        path.write_text(HEADER.format(stack_file=stack_file) + yaml.safe_dump_all(resources, sort_keys=False))
        written.append(path)
    (out_dir / "stack.yaml").write_text(stack_text)
    (out_dir / "kustomization.yaml").write_text(
        HEADER.format(stack_file=stack_file) + yaml.safe_dump(kustomization(sorted(files)), sort_keys=False))
    return [*written, out_dir / "stack.yaml", out_dir / "kustomization.yaml"]
