"""`hetflow compose`: the committed compose.yaml is what the generator writes, it validates against the
Compose Specification's schema, every service has a health check and waits for healthy dependencies."""

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from hetflow.deploy.compose import compose_file, render
from hetflow.runtime.config import load_stack
from hetflow.serve import SERVICES
from hetflow.supervisor import plan

REPO = Path(__file__).resolve().parents[3]
STACK = REPO / "examples" / "compose-gpu.yaml"
SCHEMA = jsonschema.Draft7Validator(json.loads((REPO / "tests" / "data" / "compose-spec.json").read_text()))
"""The specification's schema declares draft-07."""


def raw_stack() -> dict:
    return load_stack(STACK, environ={})


def test_the_committed_compose_file_is_what_hetflow_compose_writes():
    assert (REPO / "compose.yaml").read_text() == render(raw_stack(), "./examples/compose-gpu.yaml")


@pytest.mark.parametrize("stack", ["compose-gpu.yaml", "local-sim.yaml"])
def test_the_compose_file_validates_against_the_compose_specification(stack):
    raw = load_stack(REPO / "examples" / stack, environ={})
    if stack == "local-sim.yaml":  # a loopback stack, given container names as compose needs
        for name in ("monitor", "router", "predictor", "balancer", "gateway"):
            raw[name]["host"] = name
        for engine in raw["engines"]:
            engine["host"] = f"engine-{engine['name']}"
    SCHEMA.validate(yaml.safe_load(render(raw, f"./examples/{stack}")))


def test_the_schema_check_catches_a_malformed_service():
    doc = compose_file(raw_stack(), "./stack.yaml")
    doc["services"]["monitor"]["healthcheck"]["probe_every"] = "5s"  # not a healthcheck field
    with pytest.raises(jsonschema.ValidationError):
        SCHEMA.validate(doc)


def test_every_service_has_a_container_named_as_the_config_dials_it_and_a_health_check():
    services = compose_file(raw_stack(), "./stack.yaml")["services"]
    for svc in plan(raw_stack()):
        host = svc.address.removeprefix("http://").rsplit(":", 1)[0]
        assert host in services, f"{svc.name} dials {host}, which the compose file does not define"
        entry = services[host]
        assert entry["command"][0] in SERVICES and entry["command"][0] == svc.service
        assert entry["healthcheck"]["test"] == ["CMD", "hetflow", "health", svc.address]


def test_dependencies_wait_until_healthy():
    services = compose_file(raw_stack(), "./stack.yaml")["services"]
    assert set(services["balancer"]["depends_on"]) == {"monitor", "router", "predictor", "engine-small-0",
                                                       "engine-large-0"}
    assert services["gateway"]["depends_on"]["balancer"] == {"condition": "service_healthy"}
    assert all(d["condition"] == "service_healthy" for s in services.values() for d in s.get("depends_on", {}).values())
    assert services["gateway"]["ports"] == ["8000:8000"]
    gpus = [s["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] for s in services.values()
            if "deploy" in s]
    assert gpus == [["0"], ["1"]]


def test_a_loopback_host_is_an_error_naming_the_section():
    raw = raw_stack()
    raw["router"]["host"] = "127.0.0.1"
    with pytest.raises(ValueError, match="router.host"):
        compose_file(raw, "./stack.yaml")


def test_every_image_target_the_compose_file_builds_is_a_dockerfile_stage():
    stages = {line.split()[-1] for line in (REPO / "Dockerfile").read_text().splitlines()
              if line.startswith("FROM ") and " AS " in line}
    targets = {s["build"]["target"] for s in compose_file(raw_stack(), "./stack.yaml")["services"].values()}
    assert targets == {"control-plane", "engine"} and targets <= stages


def secured_stack() -> dict:
    raw = raw_stack()
    raw["security"] = {"tls": {"ca_file": "certs/ca.crt", "cert_file": "certs/{identity}.crt",
                               "key_file": "/etc/keys/{identity}.key"}}
    return raw


def test_with_tls_each_container_gets_only_its_own_identity_files_and_checks_health_as_itself():
    raw = secured_stack()
    services = compose_file(raw, "./stack.yaml")["services"]
    SCHEMA.validate(compose_file(raw, "./stack.yaml"))
    assert services["monitor"]["volumes"] == ["./stack.yaml:/etc/hetflow/stack.yaml:ro",
                                              "./certs/ca.crt:/app/certs/ca.crt:ro",
                                              "./certs/monitor.crt:/app/certs/monitor.crt:ro",
                                              "/etc/keys/monitor.key:/etc/keys/monitor.key:ro"]
    engine_volumes = " ".join(services["engine-small-0"]["volumes"])
    assert "engine.key" in engine_volumes and "monitor" not in engine_volumes
    for svc in plan(raw):
        test = services[svc.address.removeprefix("http://").removeprefix("https://").rsplit(":", 1)[0]]
        assert test["healthcheck"]["test"][-4:] == ["-c", "/etc/hetflow/stack.yaml", "--identity", svc.service]


def test_a_service_token_is_mounted_into_every_container():
    raw = raw_stack()
    raw["security"] = {"service_token_file": "secrets/token"}
    for entry in compose_file(raw, "./stack.yaml")["services"].values():
        assert "./secrets/token:/app/secrets/token:ro" in entry["volumes"]


def test_a_stack_with_a_vllm_sim_pool_is_refused_with_a_reason():
    raw = load_stack(REPO / "examples" / "vllm-sim-pool.yaml", environ={})
    with pytest.raises(ValueError, match="vllm_sim servers are a benchmark pool"):
        compose_file(raw, "stack.yaml")


def test_the_dispatch_ticket_key_is_mounted_only_where_tickets_are_signed_or_checked():
    raw = raw_stack()
    raw["security"] = {"service_token_file": "secrets/token", "ticket_key_file": "secrets/ticket.key"}
    services = compose_file(raw, "./stack.yaml")["services"]
    holders = {name for name, entry in services.items() if "./secrets/ticket.key:/app/secrets/ticket.key:ro"
               in entry.get("volumes", [])}
    assert holders == {name for name in services if name == "balancer" or name.startswith("engine-")}
