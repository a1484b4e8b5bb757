"""`hetflow kube`: the committed deploy/k8s is what the generator writes, every resource validates against
the Kubernetes schemas (strict), and each pod is probed, scraped and addressed as the stack dials it."""

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from hetflow.deploy.kube import manifests, write
from hetflow.runtime.config import load_stack
from hetflow.supervisor import plan

REPO = Path(__file__).resolve().parents[3]
STACK = REPO / "examples" / "compose-gpu.yaml"
KUBERNETES_VERSION = "1.30.0"


def raw_stack() -> dict:
    return load_stack(STACK, environ={})


def resources() -> list[dict]:
    return [r for rs in manifests(raw_stack()).values() for r in rs]


def by_kind(kind: str) -> dict[str, dict]:
    return {r["metadata"]["name"]: r for r in resources() if r["kind"] == kind}


def test_the_committed_manifests_are_what_hetflow_kube_writes(tmp_path):
    write(raw_stack(), STACK.read_text(), "examples/compose-gpu.yaml", tmp_path)
    committed = REPO / "deploy" / "k8s"
    assert sorted(p.name for p in committed.iterdir()) == sorted(p.name for p in tmp_path.iterdir())
    for path in tmp_path.iterdir():
        assert (committed / path.name).read_text() == path.read_text(), path.name


@pytest.mark.parametrize("resource", resources(), ids=lambda r: f"{r['kind']}/{r['metadata']['name']}")
def test_every_resource_validates_against_the_kubernetes_schema(resource):
    kubernetes_validate.validate(resource, KUBERNETES_VERSION, strict=True)


def test_the_validator_rejects_a_malformed_deployment():
    deployment = by_kind("Deployment")["monitor"]
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["grpcc"] = {"port": 1}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


def test_every_service_the_stack_dials_has_a_service_probes_and_scrape_annotations():
    deployments, services = by_kind("Deployment"), by_kind("Service")
    for svc in plan(raw_stack()):
        host, port = svc.address.removeprefix("http://").rsplit(":", 1)
        assert services[host]["spec"]["ports"][0]["port"] == int(port)
        pod = deployments[host]["spec"]["template"]
        container = pod["spec"]["containers"][0]
        probe = container["readinessProbe"]
        assert probe == ({"httpGet": {"path": "/health", "port": int(port)}, "periodSeconds": 5, "failureThreshold": 3}
                         if svc.service == "gateway" else {"grpc": {"port": int(port)}, "periodSeconds": 5,
                                                           "failureThreshold": 3})
        assert pod["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
        assert container["volumeMounts"][0]["mountPath"] == "/etc/hetflow"


def test_pods_bind_every_interface_and_engines_advertise_their_service():
    engine = by_kind("Deployment")["engine-small-0"]["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in engine["env"]}
    assert env == {"HETFLOW__ENGINES__SMALL_0__HOST": "0.0.0.0",
                   "HETFLOW__ENGINES__SMALL_0__ADVERTISE_ADDRESS": "engine-small-0:50120"}
    assert engine["resources"]["limits"]["nvidia.com/gpu"] == 1
    # the override names a real field: the engine's config takes it
    from engine_svc.config import from_stack

    raw = load_stack(STACK, environ=env)
    cfg = from_stack(raw, "small-0")
    assert (cfg.serve.host, cfg.advertise_address) == ("0.0.0.0", "engine-small-0:50120")


def test_the_kustomization_lists_every_file_and_generates_the_config_map():
    kustomization = yaml.safe_load((REPO / "deploy" / "k8s" / "kustomization.yaml").read_text())
    for name in kustomization["resources"] + kustomization["configMapGenerator"][0]["files"]:
        assert (REPO / "deploy" / "k8s" / name).exists()


def test_with_mutual_tls_each_identity_has_a_secret_of_its_own_and_probes_speak_tls(tmp_path):
    from hetflow.deploy.certs import security_section, write_certs

    raw = raw_stack()
    write_certs(raw, tmp_path / "certs")
    raw["security"] = security_section(tmp_path / "certs")
    out = tmp_path / "k8s"
    write(raw, STACK.read_text(), "stack.yaml", out)
    kustomization = yaml.safe_load((out / "kustomization.yaml").read_text())
    secrets = {g["name"]: g["files"] for g in kustomization["secretGenerator"]}
    assert set(secrets) == {f"hetflow-{i}-security" for i in ("monitor", "router", "predictor", "balancer",
                                                                 "gateway", "engine")}
    for files in secrets.values():
        assert all((out / f.split("=", 1)[1]).is_file() for f in files)
    assert (out / "secrets" / "engine" / "key").read_bytes() == (tmp_path / "certs" / "engine.key").read_bytes()
    assert (out / "secrets" / ".gitignore").read_text().endswith("*\n")

    pods = {r["metadata"]["name"]: r for rs in manifests(raw).values() for r in rs if r["kind"] == "Deployment"}
    monitor = pods["monitor"]["spec"]["template"]["spec"]
    assert monitor["volumes"][1]["secret"]["secretName"] == "hetflow-monitor-security"
    mounts = {m["mountPath"]: m["subPath"] for m in monitor["containers"][0]["volumeMounts"] if m["name"] == "security"}
    assert mounts == {str(tmp_path / "certs" / "ca.crt"): "ca", str(tmp_path / "certs" / "monitor.crt"): "cert",
                      str(tmp_path / "certs" / "monitor.key"): "key"}
    probe = monitor["containers"][0]["readinessProbe"]
    assert probe["exec"]["command"][-2:] == ["--identity", "monitor"] and "grpc" not in probe
    gateway = pods["gateway"]["spec"]["template"]["spec"]["containers"][0]
    assert gateway["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    for pod in pods.values():
        kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)


def test_a_missing_certificate_is_an_error_that_says_how_to_make_it(tmp_path):
    raw = raw_stack()
    raw["security"] = {"tls": {"ca_file": str(tmp_path / "nope.crt"), "cert_file": str(tmp_path / "{identity}.crt"),
                               "key_file": str(tmp_path / "{identity}.key")}}
    with pytest.raises(ValueError, match="hetflow certs"):
        write(raw, STACK.read_text(), "stack.yaml", tmp_path / "k8s")


def test_a_stack_with_a_vllm_sim_pool_is_refused_with_a_reason():
    raw = load_stack(REPO / "examples" / "vllm-sim-pool.yaml", environ={})
    with pytest.raises(ValueError, match="vllm_sim servers are a benchmark pool"):
        manifests(raw)


def test_a_balancer_that_picks_endpoints_gets_its_inference_pool():
    raw = raw_stack()
    raw["balancer"].update(endpoint_picker_model="Qwen/Qwen2.5-7B-Instruct",
                           endpoint_picker_pool_labels={"app": "vllm-qwen-7b"}, endpoint_picker_target_port=8000)
    (pool,) = manifests(raw)["inference-pool.yaml"]
    balancer = next(r for rs in manifests(raw).values() for r in rs
                    if r["kind"] == "Service" and r["metadata"]["name"] == pool["spec"]["endpointPickerRef"]["name"])
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    assert pool["metadata"]["name"] == "qwen-qwen2-5-7b-instruct"
    assert pool["spec"]["selector"] == {"matchLabels": {"app": "vllm-qwen-7b"}}
    assert pool["spec"]["targetPorts"] == [{"number": 8000}]
    assert pool["spec"]["endpointPickerRef"]["port"]["number"] == balancer["spec"]["ports"][0]["port"]
    raw["balancer"]["endpoint_picker_pool_labels"] = {}
    with pytest.raises(ValueError, match="endpoint_picker_pool_labels"):
        manifests(raw)


def test_pods_stop_within_their_drain_and_engines_and_the_monitor_go_before_their_replacement():
    """The pod's grace covers the service's drain (``stop_grace_s``), the token carriers' longest; an
    engine's new pod needs the GPU the old one holds, and two monitors would split the engines."""
    from hetflow.supervisor import stop_grace_s

    raw = raw_stack()
    deployments = by_kind("Deployment")
    for svc in plan(raw):
        name = svc.name.split(":")[-1] if svc.service != "engine" else f"engine-{svc.name.split(':')[1]}"
        spec = deployments[name]["spec"]
        assert spec["template"]["spec"]["terminationGracePeriodSeconds"] >= stop_grace_s(raw, svc)
        assert (spec.get("strategy") == {"type": "Recreate"}) == (svc.service in ("engine", "monitor"))
    engine = deployments["engine-small-0"]["spec"]["template"]["spec"]
    assert engine["terminationGracePeriodSeconds"] > deployments["router"]["spec"]["template"]["spec"][
        "terminationGracePeriodSeconds"]
    assert {"shm", "hf-cache"} <= {v["name"] for v in engine["volumes"]}


def test_the_gateways_liveness_does_not_hang_on_the_balancer():
    gateway = by_kind("Deployment")["gateway"]["spec"]["template"]["spec"]["containers"][0]
    assert "tcpSocket" in gateway["livenessProbe"] and gateway["readinessProbe"]["httpGet"]["path"] == "/health"
