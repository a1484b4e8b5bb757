"""``hetflow kube -c STACK.yaml -o DIR``: kustomize manifests that run a stack on Kubernetes.

One Deployment and one Service per hetflow service and per engine, named by the host its config
section gives (the name the other services dial, as in compose). Each pod binds all interfaces (an
environment override of its own section's ``host``, which only that pod reads) while the others dial
its Service. The stack config travels as a ConfigMap from kustomize's ``configMapGenerator``, so a
changed config rolls the pods. Probes ask gRPC health (the gateway's ``/health``); pods carry the
Prometheus scrape annotations of their metrics port; engines with ``backend: vllm`` ask one GPU. One
Deployment per configured engine: the monitor tracks engines by name, so more replicas of a model are
more engine entries in the stack config.

A balancer that is an InferencePool's endpoint picker (``balancer.endpoint_picker_model``, issue 34)
also gets the InferencePool, which selects the pool's model-server pods by
``balancer.endpoint_picker_pool_labels`` and names the balancer's Service as its ``endpointPickerRef``.

With a ``security`` section, each identity's files (the CA, its certificate and key, the service
token) become a Secret of its own from kustomize's ``secretGenerator`` (copied under ``DIR/secrets/``,
which holds a ``.gitignore`` so the keys are not committed by accident), mounted read-only at the
paths the config names; only that identity's pods mount it. The kubelet's gRPC probe speaks no TLS,
so probes then run ``hetflow health`` in the pod as the service itself, and the gateway's are HTTPS.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any, Mapping

import yaml

from hetflow.deploy.compose import (
    CONTROL_PLANE_IMAGE,
    ENGINE_IMAGE,
    HF_CACHE_IN_CONTAINER,
    STACK_IN_CONTAINER,
    engine_gpus,
    health_command,
    refuse_vllm_sim,
    secured,
    security_files,
    service_host,
)
from hetflow.runtime.config import env_key
from hetflow.supervisor import ServiceProcess, plan, service_section, stop_grace_s

CONFIG_MAP = "hetflow-stack"
LABEL = "app.kubernetes.io/name"
SECRETS_DIR = "secrets"


def secret_name(identity: str) -> str:
    return f"hetflow-{identity}-security"


def _env_section(svc: ServiceProcess) -> str:
    return f"ENGINES__{env_key(svc.extra_args[-1])}" if svc.service == "engine" else svc.service.upper()


def _check(raw: Mapping[str, Any], svc: ServiceProcess, port: int) -> dict[str, Any]:
    tls = bool((raw.get("security") or {}).get("tls"))
    if svc.service == "gateway":
        return {"httpGet": {"path": "/health", "port": port, **({"scheme": "HTTPS"} if tls else {})}}
    if secured(raw):
        return {"exec": {"command": health_command(raw, svc)}, "timeoutSeconds": 3}
    return {"grpc": {"port": port}}


def _probes(raw: Mapping[str, Any], svc: ServiceProcess, port: int, initial_delay_s: int) -> dict[str, Any]:
    """Readiness and start-up ask the service's health. The gateway's ``/health`` also asks the balancer's,
    so its liveness asks only that it accepts connections: a balancer away would otherwise restart every
    gateway, and keep them restarting after it is back."""
    check = _check(raw, svc, port)
    alive = {"tcpSocket": {"port": port}} if svc.service == "gateway" else check
    return {"readinessProbe": {**check, "periodSeconds": 5, "failureThreshold": 3},
            "livenessProbe": {**alive, "periodSeconds": 10, "failureThreshold": 6},
            "startupProbe": {**check, "periodSeconds": 5, "failureThreshold": max(1, initial_delay_s // 5)}}


def _env(name: str, svc: ServiceProcess, port: int) -> list[dict[str, str]]:
    """The pod binds every interface; an engine tells the monitor its Service, where the balancer dials it."""
    env = [{"name": f"HETFLOW__{_env_section(svc)}__HOST", "value": "0.0.0.0"}]
    if svc.service == "engine":
        env.append({"name": f"HETFLOW__{_env_section(svc)}__ADVERTISE_ADDRESS", "value": f"{name}:{port}"})
    return env


def _container(raw: Mapping[str, Any], name: str, svc: ServiceProcess, section: Mapping[str, Any],
               vllm: bool) -> dict[str, Any]:
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
        "volumeMounts": [{"name": "stack", "mountPath": str(Path(STACK_IN_CONTAINER).parent), "readOnly": True},
                         *({"name": "security", "mountPath": inside, "subPath": role, "readOnly": True}
                           for role, (_, inside) in security_files(raw, svc.service).items())],
        **_probes(raw, svc, port, 900 if vllm else 60),
    }
    if vllm:
        container["resources"] = {"limits": {"nvidia.com/gpu": engine_gpus(section)}}
        container["volumeMounts"] += [{"name": "shm", "mountPath": "/dev/shm"},
                                      {"name": "hf-cache", "mountPath": HF_CACHE_IN_CONTAINER}]
    return container


def _deployment(raw: Mapping[str, Any], name: str, svc: ServiceProcess, section: Mapping[str, Any],
                vllm: bool) -> dict[str, Any]:
    annotations = ({"prometheus.io/scrape": "true", "prometheus.io/port": str(section["metrics_port"]),
                    "prometheus.io/path": "/metrics"} if section.get("metrics_port")
                   else {"prometheus.io/scrape": "true", "prometheus.io/port": str(section["port"]),
                         "prometheus.io/path": "/metrics"} if svc.service == "gateway" else {})
    labels = {LABEL: name, "app.kubernetes.io/part-of": "hetflow", "app.kubernetes.io/component": svc.service}
    volumes: list[dict[str, Any]] = [{"name": "stack", "configMap": {"name": CONFIG_MAP}}]
    if security_files(raw, svc.service):
        volumes.append({"name": "security", "secret": {"secretName": secret_name(svc.service), "defaultMode": 0o400}})
    if vllm:   # vLLM's shared memory (compose's shm_size) and the weights kept across container restarts
        volumes += [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}},
                    {"name": "hf-cache", "emptyDir": {}}]
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": 1,
            # an engine's new pod needs the GPU its old one holds, and two monitors would split the engines
            # between them: the old pod goes first
            **({"strategy": {"type": "Recreate"}} if svc.service in ("engine", "monitor") else {}),
            "selector": {"matchLabels": {LABEL: name}},
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": {"containers": [_container(raw, name, svc, section, vllm)],
                         "terminationGracePeriodSeconds": math.ceil(stop_grace_s(raw, svc)),
                         "volumes": volumes},
            },
        },
    }


def _service(name: str, svc: ServiceProcess, section: Mapping[str, Any]) -> dict[str, Any]:
    ports = [{"name": "http" if svc.service == "gateway" else "grpc", "port": int(section["port"]),
              "targetPort": int(section["port"])}]
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "labels": {LABEL: name}},
            "spec": {"selector": {LABEL: name}, "ports": ports}}


def _inference_pool(balancer: str, section: Mapping[str, Any]) -> dict[str, Any]:
    """The Gateway API Inference Extension's InferencePool (inference.networking.k8s.io/v1) whose endpoint
    picker is the balancer (issue 34): the pool's model-server pods by their labels, their port, and the
    balancer's Service and port as ``endpointPickerRef``. FailClose: no call goes unpicked."""
    labels = dict(section.get("endpoint_picker_pool_labels") or {})
    if not labels:
        raise ValueError("balancer.endpoint_picker_pool_labels must name the labels of the pool's model-server "
                         "pods, for the InferencePool's selector")
    model = str(section["endpoint_picker_model"])
    name = "".join(c if c.isalnum() else "-" for c in model.lower()).strip("-")
    return {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
            "metadata": {"name": name, "labels": {LABEL: balancer}},
            "spec": {"selector": {"matchLabels": labels},
                     "targetPorts": [{"number": int(section.get("endpoint_picker_target_port", 8000))}],
                     "endpointPickerRef": {"name": balancer, "port": {"number": int(section["port"])},
                                           "failureMode": "FailClose"}}}


def manifests(raw: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """File name -> the resources it holds, one file per service (and the InferencePool the balancer picks
    endpoints for, when it is one's endpoint picker)."""
    refuse_vllm_sim(raw, "hetflow kube")
    files: dict[str, list[dict[str, Any]]] = {}
    for svc in plan(raw):
        section = service_section(raw, svc)
        name = service_host(raw, svc)
        vllm = svc.service == "engine" and section.get("backend", "sim") == "vllm"
        files[f"{name}.yaml"] = [_deployment(raw, name, svc, section, vllm), _service(name, svc, section)]
        if svc.service == "balancer" and section.get("endpoint_picker_model"):
            files["inference-pool.yaml"] = [_inference_pool(name, section)]
    return files


def secret_files(raw: Mapping[str, Any]) -> dict[str, dict[str, Path]]:
    """Identity -> role -> the file on this machine, for each identity the stack's pods run as."""
    identities = sorted({svc.service for svc in plan(raw)})
    return {identity: {role: Path(host) for role, (host, _) in files.items()}
            for identity in identities if (files := security_files(raw, identity))}


def kustomization(files: list[str], secrets: Mapping[str, Mapping[str, Path]] | None = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "labels": [{"pairs": {"app.kubernetes.io/part-of": "hetflow"}}],
        "resources": files,
        "configMapGenerator": [{"name": CONFIG_MAP, "files": ["stack.yaml"]}]}
    if secrets:
        doc["secretGenerator"] = [{"name": secret_name(identity),
                                   "files": [f"{role}={SECRETS_DIR}/{identity}/{role}" for role in roles]}
                                  for identity, roles in secrets.items()]
    return doc


def _copy_secrets(secrets: Mapping[str, Mapping[str, Path]], out_dir: Path) -> None:
    for identity, roles in secrets.items():
        for role, source in roles.items():
            if not source.is_file():
                raise ValueError(f"{source} ({identity}'s {role}) does not exist: write the stack's certificates "
                                 "first (`hetflow certs -c STACK -o DIR`)")
            target = out_dir / SECRETS_DIR / identity / role
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            target.chmod(0o600)
    (out_dir / SECRETS_DIR / ".gitignore").write_text("# private keys: never commit them\n*\n")


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
    secrets = secret_files(raw)
    if secrets:
        _copy_secrets(secrets, out_dir)
    (out_dir / "kustomization.yaml").write_text(
        HEADER.format(stack_file=stack_file) + yaml.safe_dump(kustomization(sorted(files), secrets), sort_keys=False))
    return [*written, out_dir / "stack.yaml", out_dir / "kustomization.yaml"]
