"""The Grafana dashboard asks only for metrics the services export (a renamed metric fails here)."""

import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
DASHBOARD = REPO / "deploy" / "grafana" / "hetflow-dashboard.json"
SUFFIXES = ("_bucket", "_count", "_sum", "_total")


def exported_metrics() -> set[str]:
    """Every name a Counter, Gauge or Histogram is declared with, in the services and the runtime."""
    names = set()
    for package in ("hetflow", "router_svc", "predictor_svc", "monitor_svc", "balancer_svc", "engine_svc",
                    "gateway_svc"):
        for path in (REPO / package).rglob("*.py"):
            names |= set(re.findall(r'(?:Counter|Gauge|Histogram)\(\s*"([a-z0-9_:]+)"', path.read_text()))
    return names


def base_name(series: str, exported: set[str]) -> str:
    if series in exported:
        return series
    for suffix in SUFFIXES:
        if series.endswith(suffix) and series.removesuffix(suffix) in exported:
            return series.removesuffix(suffix)
    return series


def test_every_panel_queries_exported_metrics():
    exported = exported_metrics()
    panels = json.loads(DASHBOARD.read_text())["panels"]
    assert panels
    for panel in panels:
        for target in panel["targets"]:
            series = re.findall(r"\b((?:vllm:|hetflow_)[a-z0-9_:]+)", target["expr"])
            assert series, panel["title"]
            missing = [s for s in series if base_name(s, exported) not in exported]
            assert not missing, f"{panel['title']}: {missing}"
