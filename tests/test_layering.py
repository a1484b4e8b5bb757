"""The import rules that keep hetflow one core with thin services around it (issue 11).

- ``hetflow.core`` imports no gRPC or protobuf, no service, no simulator, nothing of hetflow outside it;
- a service imports only itself, the core, the contracts (``hetflow.v1``, ``hetflow.wire``) and the
  runtime (``hetflow.runtime``): never another service, the simulator or the tools;
- the simulator imports only itself and the core;
- ``hetflow.wire`` converts between the contracts and the core, and imports nothing else of hetflow.

Every import counts, including those inside functions.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SERVICES = ("router_svc", "predictor_svc", "monitor_svc", "balancer_svc", "engine_svc", "gateway_svc")
FIRST_PARTY = ("hetflow", "simulator", *SERVICES)


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.update(f"{node.module}.{alias.name}" for alias in node.names)  # the name or submodule taken
    return found


def modules_in(package: str) -> list[Path]:
    base = ROOT / package.replace(".", "/")
    return sorted(base.rglob("*.py")) if base.is_dir() else [base.with_suffix(".py")]


def within(name: str, *prefixes: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def violations(package: str, allowed: tuple[str, ...], forbidden_third_party: tuple[str, ...] = ()) -> list[str]:
    out = []
    for path in modules_in(package):
        for name in imports_of(path):
            first_party = within(name, *FIRST_PARTY)
            if (first_party and not within(name, package, *allowed)) or within(name, *forbidden_third_party):
                out.append(f"{path.relative_to(ROOT)} imports {name}")
    return sorted(set(out))


def test_the_core_imports_no_grpc_no_service_no_simulator():
    assert violations("hetflow.core", (), ("grpc", "google.protobuf", "grpc_health")) == []


@pytest.mark.parametrize("service", SERVICES)
def test_a_service_imports_only_the_core_the_contracts_and_the_runtime(service: str):
    allowed = ("hetflow.core", "hetflow.v1", "hetflow.wire", "hetflow.runtime")
    assert violations(service, allowed) == []


def test_the_simulator_imports_only_the_core():
    assert violations("simulator", ("hetflow.core",), ("grpc", "google.protobuf")) == []


def test_the_wire_module_imports_only_the_core_and_the_contracts():
    assert violations("hetflow.wire", ("hetflow.core", "hetflow.v1")) == []


def test_the_rule_catches_a_service_importing_another(tmp_path: Path):
    offender = tmp_path / "offender.py"
    offender.write_text("def f():\n    from engine_svc.backends import sim\n")
    [name] = imports_of(offender)
    assert name == "engine_svc.backends.sim"
    assert within(name, *FIRST_PARTY) and not within(name, "balancer_svc", "hetflow.core", "hetflow.runtime")


def test_the_simulator_and_the_balancer_start_without_the_training_libraries():
    """Training libraries load only where a model is trained or a test statistic computed: starting the
    simulator, whose start-up every capacity probe and CLI run pays (issue 32), imports none of them."""
    import subprocess
    import sys

    heavy = ("sklearn", "scipy.stats", "torch", "onnxruntime", "transformers", "quantile_forest")
    code = ("import sys, simulator.run, hetflow.core.policies, hetflow.core.monitor.state; "
            f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
