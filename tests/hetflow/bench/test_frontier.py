"""The score-against-latency figure, drawn by one command from a recorded results file."""

import json
from pathlib import Path

import pytest

from hetflow.bench.frontier import main, panel
from hetflow.bench.plots import score_against_latency, slack_of

RECORDED = Path("tests/data/frontier-results.json")


def test_the_figure_is_drawn_from_a_recorded_results_file(tmp_path, capsys):
    out = tmp_path / "frontier.png"
    assert main([str(RECORDED), str(RECORDED), "-o", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and str(out) in capsys.readouterr().out


def test_a_panel_holds_every_policy_and_each_rival_once_at_the_common_load():
    title, rows = panel(json.loads(RECORDED.read_text()))
    assert title == "tiny-frontier\n80% of the best rival's capacity"
    assert sorted(r["policy"] for r in rows) == ["hetflow", "hetflow:latency_slack=1.0", "llm-d", "semantic-router"]
    assert all(0.0 <= r["task_score"] <= 1.0 and r["latency_per_output_token_ms"] > 0 for r in rows)


def test_an_unknown_load_is_refused_with_the_loads_there_are():
    with pytest.raises(SystemExit, match="80% of the best rival's capacity"):
        panel(json.loads(RECORDED.read_text()), "50% of least-load capacity")


@pytest.mark.parametrize(("spec", "base", "slack"), [
    ("hetflow", "hetflow", None), ("hetflow:latency_slack=1.0", "hetflow", 1.0),
    ("chimera:confidence_margin=0.1,latency_slack=3", "chimera:confidence_margin=0.1", 3.0)])
def test_a_policy_at_several_slacks_is_one_line(spec, base, slack):
    assert slack_of(spec) == (base, slack)


def test_settings_that_land_on_one_point_are_drawn(tmp_path):
    # per-workflow settings can make a slack override change nothing: the points tie, the default's among them
    point = {"latency_per_output_token_ms": 18.0, "task_score": 0.84}
    rows = [{"policy": "hetflow", **point}, {"policy": "hetflow:latency_slack=0.5", **point},
            {"policy": "hetflow:latency_slack=1.0", **point}]
    out = score_against_latency([("tied", rows)], tmp_path / "tied.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
