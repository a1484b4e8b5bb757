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
    code = ("import sys, simulator.run, hetflow.core.policies.builtins, hetflow.core.monitor.state; "
            f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def first_party_modules() -> dict[str, Path]:
    """Every first-party module by name (the generated contracts left out)."""
    found = {}
    for package in FIRST_PARTY:
        for path in modules_in(package):
            if not within(module_name(path), "hetflow.v1"):
                found[module_name(path)] = path
    return found


def imported_modules(path: Path, name: str, known: set[str]) -> set[str]:
    """The first-party modules ``path`` imports anywhere in it (a function's imports too), apart from those
    under ``if TYPE_CHECKING:``, which never run; a name taken from a package counts as the package."""
    tree = ast.parse(path.read_text(), filename=str(path))
    skipped = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and isinstance(node.test, ast.Name)
               and node.test.id == "TYPE_CHECKING" for n in ast.walk(node)}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped or not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def test_no_module_imports_itself_through_others():
    modules = first_party_modules()
    graph = {name: imported_modules(path, name, set(modules)) for name, path in modules.items()}
    assert import_cycles(graph) == []


def test_the_cycle_check_finds_a_circle_through_a_function_and_a_package():
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_an_import_under_type_checking_is_not_an_edge_and_one_in_a_function_is(tmp_path: Path):
    module = tmp_path / "m.py"
    module.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import a\n"
                      "def f():\n    from pkg.b import thing\n")
    assert imported_modules(module, "pkg.m", {"pkg", "pkg.a", "pkg.b", "pkg.m"}) == {"pkg.b"}
