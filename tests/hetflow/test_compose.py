"""compose.yaml and its stack config agree: one container per service, named as the config dials it."""

from pathlib import Path

import yaml

from hetflow.runtime.config import load_stack
from hetflow.serve import SERVICES
from hetflow.supervisor import plan

REPO = Path(__file__).resolve().parents[2]


def test_every_service_of_the_config_has_a_container_with_its_address():
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())["services"]
    raw = load_stack(REPO / "examples" / "compose-gpu.yaml", environ={})
    for svc in plan(raw):
        host = svc.address.rsplit(":", 1)[0]
        assert host in compose, f"{svc.name} dials {host}, which compose.yaml does not define"
        command = compose[host]["command"]
        assert command[0] in SERVICES and command[0] == svc.service
        if svc.extra_args:
            assert command[-2:] == svc.extra_args
