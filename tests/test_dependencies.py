"""Every third-party module hetflow imports is installed by hetflow's own dependencies and theirs; only
vLLM itself comes from the ``cpu``/``gpu`` extras (the engine image). A package present here only
because vLLM pulls it in would be missing from the control-plane image, which has no vLLM.

The control plane (the services, the core, the runtime, the client and the commands that run a stack)
installs and runs without the lab: it imports nothing that only the ``bench`` extra installs (the
benchmarks' tools, the workloads' data sets, the plots) and none of the lab's own modules."""

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


CONTROL_PLANE = ("router_svc", "predictor_svc", "monitor_svc", "balancer_svc", "engine_svc", "gateway_svc",
                 "hetflow/core", "hetflow/runtime", "hetflow/v1", "hetflow/wire.py", "hetflow/client.py",
                 "hetflow/serve.py", "hetflow/supervisor.py", "hetflow/stackctl.py", "hetflow/deploy",
                 "hetflow/planner", "simulator")
"""What the service image runs: the services and what they stand on (the balancer's alpha tuner replays the
simulator), and the commands that start, deploy and plan a stack."""
LAB_MODULES = ("hetflow.bench",)
"""The lab's own modules. The workloads' generators stay beside the control plane (the planner may plan for
a family), but their real data comes from the ``bench`` extra's data sets."""


def files_of(*where: str) -> list[Path]:
    found: list[Path] = []
    for part in where:
        path = ROOT / part
        found += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return found


def imports_in(path: Path) -> list[str]:
    """Every absolute import of the file, a function's included."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return names


def third_party_imports(files: list[Path]) -> dict[str, str]:
    """Top-level module -> one file importing it."""
    found: dict[str, str] = {}
    for path in files:
        for name in imports_in(path):
            top = name.split(".")[0]
            if top not in sys.stdlib_module_names and top not in PACKAGES and top != "__future__":
                found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def not_installed_by(requirements: list[str], imports: dict[str, str]) -> dict[str, str]:
    """The imported modules (but vLLM) that no distribution the requirements install provides."""
    closure = declared_closure(requirements)
    providers = md.packages_distributions()
    return {module: where for module, where in imports.items() if module != "vllm"
            and not {d.lower().replace("_", "-") for d in providers.get(module, [])} & closure}


def test_every_third_party_import_is_declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + project["optional-dependencies"]["bench"]
    undeclared = not_installed_by(requirements, third_party_imports(files_of(*PACKAGES)))
    assert undeclared == {}, f"imported but not declared in pyproject.toml: {undeclared}"


def test_the_control_plane_needs_nothing_of_the_lab():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    control = files_of(*CONTROL_PLANE)
    assert not_installed_by(project["dependencies"], third_party_imports(control)) == {}
    lab = {f"{path.relative_to(ROOT)} imports {name}" for path in control for name in imports_in(path)
           if any(name == m or name.startswith(m + ".") for m in LAB_MODULES)}
    assert lab == set()


def test_the_lab_check_sees_a_lab_package(tmp_path: Path):
    plot = tmp_path / "plot.py"
    plot.write_text("def draw():\n    import matplotlib.pyplot as plt\n    from hetflow.bench import plots\n")
    assert imports_in(plot) == ["matplotlib.pyplot", "hetflow.bench"]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert set(not_installed_by(project["dependencies"], {"matplotlib": "plot.py"})) == {"matplotlib"}


def test_the_wheel_holds_the_control_plane_not_the_lab(tmp_path: Path):
    """The service image installs the wheel: the lab's modules stay in the checkout."""
    import shutil
    import subprocess
    import zipfile

    source = tmp_path / "src"  # the tracked files alone: a build/ left in the checkout would be packed again
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, check=True, capture_output=True, text=True).stdout
    for name in tracked.splitlines():
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp_path), str(source)], check=True, capture_output=True, timeout=600)
    (wheel,) = tmp_path.glob("hetflow-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.startswith("hetflow/bench/")]
    for module in ("hetflow/core/pipeline.py", "balancer_svc/dispatcher.py", "gateway_svc/app.py",
                   "hetflow/runtime/http1.py", "simulator/run.py", "hetflow/workloads/generate.py"):
        assert module in names
