"""Every third-party module hetflow imports is installed by hetflow's own dependencies and theirs; only
vLLM itself comes from the ``cpu``/``gpu`` extras (the engine image). A package present here only
because vLLM pulls it in would be missing from the control-plane image, which has no vLLM."""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("hetflow", "router_svc", "predictor_svc", "monitor_svc", "balancer_svc", "engine_svc", "gateway_svc",
            "simulator")


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].strip().lower().replace("_", "-")


def declared_closure(requirements: list[str]) -> set[str]:
    """The distributions the requirements install, following each one's own (non-extra) requirements."""
    closure: set[str] = set()
    pending = [_name(r) for r in requirements]
    while pending:
        dist = pending.pop()
        if dist in closure:
            continue
        closure.add(dist)
        try:
            pending += [_name(r) for r in (md.requires(dist) or []) if "extra ==" not in r]
        except md.PackageNotFoundError:
            continue
    return closure


def third_party_imports() -> dict[str, str]:
    """Top-level module -> one file importing it."""
    found: dict[str, str] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level
                         else [])
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in PACKAGES and top != "__future__":
                        found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def test_every_third_party_import_is_declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    closure = declared_closure(project["dependencies"])
    providers = md.packages_distributions()
    def installed_by_us(module: str) -> bool:
        return bool({d.lower().replace("_", "-") for d in providers.get(module, [])} & closure)

    undeclared = {module: where for module, where in third_party_imports().items()
                  if module != "vllm" and not installed_by_us(module)}
    assert undeclared == {}, f"imported but not declared in pyproject.toml: {undeclared}"
