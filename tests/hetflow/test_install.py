"""The wheel holds what it runs: built from pyproject, installed into an empty environment outside the
source tree, every service builds from the example stack (a package, module or data file missing from
the wheel fails here)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from hetflow.runtime.config import load_stack
from hetflow.serve import SERVICES
from tests.factories import stack_on_free_ports

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "examples" / "local-sim.yaml"
VLLM_SIM_CONFIG = REPO / "examples" / "vllm-sim-pool.yaml"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh environment with only the built wheel of hetflow; third-party packages come from this
    environment's site-packages by a plain path entry, which leaves its editable hetflow out."""
    root = tmp_path_factory.mktemp("install")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(root / "dist"), str(REPO)], check=True, capture_output=True)
    [wheel] = (root / "dist").glob("hetflow-*.whl")
    env_dir = root / "env"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True).stdout.strip())
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                   check=True, capture_output=True)
    (site / "third_party.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def run_outside(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(python), *args], cwd=python.parent, env=env, capture_output=True, text=True,
                          timeout=300)


def test_hetflow_comes_from_the_wheel_not_the_source_tree(installed):
    out = run_outside(installed, "-c", "import hetflow, balancer_svc, simulator; print(hetflow.__file__)")
    assert out.returncode == 0, out.stderr
    assert str(REPO) not in out.stdout and "site-packages" in out.stdout


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_every_service_builds_from_the_installed_wheel(installed, service):
    config = VLLM_SIM_CONFIG if service == "vllm-sim" else CONFIG
    named = {"engine": "engines", "vllm-sim": "vllm_sim"}.get(service)
    names = [e["name"] for e in load_stack(config, environ={})[named]][:1] if named else []
    out = run_outside(installed, "-m", "hetflow.serve", service, "-c", str(config), "--check",
                      *(["--name", names[0]] if names else []))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "builds" in out.stdout


def test_the_cli_entry_point_answers_help(installed):
    out = run_outside(installed, "-m", "hetflow.cli", "--help")
    assert out.returncode == 0 and "serve" in out.stdout, out.stderr[-2000:]


def test_a_lab_command_from_the_wheel_says_what_to_install(installed):
    out = run_outside(installed, "-m", "hetflow.cli", "bench", "--sweep", "any.yaml")
    assert out.returncode == 2 and "pip install -e '.[bench]'" in out.stderr, out.stderr[-2000:]
    assert "Traceback" not in out.stderr


def test_the_installed_wheel_starts_the_example_stack_and_serves_an_openai_call(installed, tmp_path):
    env_cache = {"HETFLOW_CACHE": str(tmp_path), "HETFLOW_RUN_DIR": str(tmp_path / "run")}

    def hetflow(*args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")} | env_cache
        return subprocess.run([str(installed), "-m", "hetflow.cli", *args], cwd=installed.parent, env=env,
                              capture_output=True, text=True, timeout=300)

    config, raw = stack_on_free_ports(CONFIG, tmp_path)
    up = hetflow("up", "-c", str(config))
    try:
        assert up.returncode == 0, up.stderr[-2000:]
        import json
        import urllib.request

        request = urllib.request.Request(f"http://127.0.0.1:{raw['gateway']['port']}/v1/completions", json.dumps(
            {"model": "hetflow", "prompt": "hello", "max_tokens": 2, "ignore_eos": True}).encode(),
            {"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as reply:
            assert json.loads(reply.read())["usage"]["completion_tokens"] == 2
        state = json.loads((tmp_path / "run" / "local-sim.json").read_text())
        assert len(state["services"]) == 8 and all(s["restarts"] == 0 for s in state["services"].values())
    finally:
        assert hetflow("down", "-c", str(config)).returncode == 0
