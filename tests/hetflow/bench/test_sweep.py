"""A tiny sweep runs end to end (table, JSON, plots); loads are calibrated by queueing share."""

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from hetflow.bench.capacity import BELOW_SLO, Probe, find_capacity
from hetflow.bench.cluster import cluster_from_stack
from hetflow.bench.sweep import (
    MAX_RATE_PER_S,
    Sweep,
    SweepSpec,
    aggregate,
    busiest_engine_call_share,
    capacity_search_start_per_s,
    capacity_search_top_per_s,
    policy_hash,
    simulate,
)
from hetflow.cli import main
from hetflow.core.engine.profile import EngineSpec
from hetflow.core.presets import resolve
from hetflow.runtime.config import load_stack
from simulator.run import ProgramResult, SimulatedCall
from tests.factories import profile

pytestmark = pytest.mark.slow  # runs whole simulations

CLUSTER = {"stack": {"name": "tiny"},
           "router": {"models": {"qwen2.5-1.5b-instruct": 0.45, "qwen2.5-7b-instruct": 0.62}},
           "engines": [{"name": "small-0", "profile": "qwen2.5-1.5b-instruct@l4"},
                       {"name": "large-0", "profile": "qwen2.5-7b-instruct@l4"}]}


@pytest.fixture()
def sweep_file(tmp_path):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump(CLUSTER))
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"name": "tiny", "cluster": str(cluster), "trace": {"family": "sql", "programs": 40},
                                    "loads": {"rates": [2.0, 8.0]}, "seeds": [1, 2],
                                    "policies": ["least-load", "mlfq", "chimera:latency_slack=1.0"]}))
    return path


def capacity_file(tmp_path, policies, seeds=(1,), family="code", programs=60, extra=None, **capacity) -> Path:
    """A tiny capacity sweep over ``CLUSTER``, its search's settings given as keywords; ``extra``: more of
    the file's fields (rivals, fractions_of)."""
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(yaml.safe_dump(CLUSTER))
    path = tmp_path / "capacity.yaml"
    path.write_text(yaml.safe_dump({"name": "cap", "cluster": str(cluster),
                                    "trace": {"family": family, "programs": programs},
                                    "loads": {"capacity_fractions": [0.5]}, "seeds": list(seeds),
                                    "capacity": capacity, "policies": list(policies), **(extra or {})}))
    return path


def test_a_tiny_sweep_writes_its_table_json_and_plots(sweep_file, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["bench", "--sweep", str(sweep_file), "--workers", "1", "-o", str(out)]) == 0
    result = json.loads((out / "results.json").read_text())
    assert len(result["runs"]) == 2 * 3 * 2 and len(result["rows"]) == 2 * 3
    assert {r["policy"] for r in result["rows"]} == {"least-load", "mlfq", "chimera:latency_slack=1.0"}
    for name in ("frontier.png", "slo_attainment.png", "latency_cdf.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr().out
    assert "| least-load |" in printed and "2/s" in printed


def small_cluster_sweep(tmp_path, targets):
    small = profile(model="qwen2.5-7b-instruct", max_num_seqs=4, kv_capacity_tokens=65536, max_model_len=65536,
                    max_num_batched_tokens=4096)
    (tmp_path / "small.yaml").write_text(yaml.safe_dump(small.to_dict()))
    cluster = {"stack": {"name": "small"}, "engines": [{"name": "e0", "profile": str(tmp_path / "small.yaml")}]}
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    spec = SweepSpec(name="cal", cluster=str(tmp_path / "cluster.yaml"), trace={"family": "code", "programs": 120},
                     policies=("least-load",), loads={"queueing_share": targets})
    return Sweep(spec, workers=1)


def test_calibration_finds_a_rate_near_the_target_queueing_share(tmp_path):
    sweep = small_cluster_sweep(tmp_path, (0.3,))
    rate = sweep.rates()["queue30%"]
    share = simulate(sweep.engines, resolve("least-load"), sweep.traces[1], sweep.signals[1], rate)["queueing_share"]
    assert 0.15 <= share <= 0.45


def test_aggregate_means_over_seeds_and_keeps_the_worst_stability():
    run = {"load": "x", "policy": "p", "rate_per_s": 1.0, "latency_per_output_token_ms": 10.0,
           "latency_s": {"mean": 1.0, "p95": 2.0}, "task_score": 0.5, "slo": {"scale_for_95pct": 2.0},
           "goodput_programs_per_s": 1.0, "queueing_share": 0.1, "preemptions": 0,
           "scheduler_overhead_ms": {"mean": 0.1}, "stability": {"stable": True}}
    other = {**run, "latency_per_output_token_ms": 20.0, "task_score": 0.7, "stability": {"stable": False}}
    [row] = aggregate([run, other])
    assert row["latency_per_output_token_ms"] == 15.0 and row["task_score"] == pytest.approx(0.6)
    assert row["seeds"] == 2 and row["stable"] is False and row["deadline_attainment_by_tenant"] is None


def test_the_busiest_engines_share_of_calls_says_how_far_a_policy_herds_them():
    engines = [EngineSpec(e, "m", profile()) for e in ("a", "b", "c")]
    result = ProgramResult("p", "w", 0.0)
    result.calls = {i: SimulatedCall(i, engine, 0.0, 0.0, 0.0, 1, 0) for i, engine in enumerate("aaab")}
    assert busiest_engine_call_share([result], engines) == 0.75  # c served nothing
    assert busiest_engine_call_share([], engines) is None


def test_deadline_attainment_is_averaged_per_tenant_and_tabled():
    from hetflow.bench.sweep_cli import table

    run = {"load": "x", "policy": "p", "rate_per_s": 1.0, "latency_per_output_token_ms": 10.0,
           "latency_s": {"mean": 1.0, "p95": 2.0}, "task_score": None, "slo": {"scale_for_95pct": 2.0},
           "goodput_programs_per_s": 1.0, "queueing_share": 0.1, "preemptions": 0,
           "scheduler_overhead_ms": {"mean": 0.1}, "stability": {"stable": True},
           "deadline_attainment_by_tenant": {"gold": 0.5, "free": 1.0}}
    [row] = aggregate([run, {**run, "deadline_attainment_by_tenant": {"gold": 0.7, "free": 1.0}}])
    assert row["deadline_attainment_by_tenant"] == pytest.approx({"free": 1.0, "gold": 0.6})
    assert "deadline met" in table([row]) and "free 100%, gold 60%" in table([row])


def test_the_speedup_over_least_load_is_a_dash_where_least_load_did_not_run():
    from hetflow.bench.sweep_cli import table

    run = {"load": "x", "policy": "p", "rate_per_s": 1.0, "latency_per_output_token_ms": 10.0,
           "latency_s": {"mean": 1.0, "p95": 2.0}, "task_score": None, "slo": {"scale_for_95pct": 2.0},
           "goodput_programs_per_s": 1.0, "queueing_share": 0.1, "preemptions": 0,
           "scheduler_overhead_ms": {"mean": 0.1}, "stability": {"stable": True}}
    alone = table(aggregate([run]))
    with_base = table(aggregate([run, {**run, "policy": "least-load", "latency_per_output_token_ms": 20.0}]))
    assert alone.splitlines()[-1].endswith("| - |") and "| 2.00x |" in with_base


def test_a_share_no_rate_reaches_is_skipped_not_guessed(tmp_path):
    sweep = small_cluster_sweep(tmp_path, (0.999,))
    notes = []
    assert sweep.rates(progress=notes.append) == {}
    assert "unreachable" in notes[0]


def test_a_tiny_capacity_sweep_reports_capacity_per_seed_and_runs_at_fractions_of_least_loads(tmp_path, capsys):
    path = capacity_file(tmp_path, ["least-load", "llm-d"], seeds=(1, 2), rel_tol=0.2)
    out = tmp_path / "out"
    assert main(["bench", "--sweep", str(path), "--workers", "1", "-o", str(out)]) == 0
    result = json.loads((out / "results.json").read_text())
    capacity = {r["policy"]: r for r in result["capacity"]}
    assert set(capacity) == {"least-load", "llm-d"} and len(capacity["llm-d"]["capacity_per_s"]) == 2
    assert capacity["least-load"]["vs_baseline"] == 1.0 and capacity["least-load"]["mean_per_s"] > 0
    for key, probes in result["probes"].items():          # each capacity is a passing probe, the next rate up failed
        policy, seed = key.rsplit("@", 1)
        rate = capacity[policy]["capacity_per_s"][[1, 2].index(int(seed))]
        assert any(p["passed"] and p["rate_per_s"] == rate for p in probes)
    assert len(result["runs"]) == 2 * 2                   # two policies x two seeds at 50% of least load's
    assert all(r["load"] == "50% of least-load capacity" for r in result["runs"])
    assert (out / "latency_against_load.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "capacity /s" in capsys.readouterr().out


def test_no_rate_above_the_work_ceiling_passes_and_each_such_probe_says_so(tmp_path):
    path = capacity_file(tmp_path, ["llm-d"], rel_tol=0.5, start_rate_per_s=200.0)
    sweep = Sweep(SweepSpec.from_yaml(path), workers=1)
    ceiling = sweep.ceiling(1)["ceiling_per_s"]
    probes = sweep.capacities()[("llm-d", 1)].probes
    assert any(p.rate_per_s > ceiling for p in probes)      # the search started above it
    for probe in probes:
        assert ("above the work ceiling" in probe.failures) == (probe.rate_per_s > ceiling)
        assert not (probe.passed and probe.rate_per_s > ceiling)
        assert (probe.summary == {}) == (probe.rate_per_s > ceiling)   # failed by the rule, not run


@pytest.mark.parametrize("ceiling_per_s", [0.0015, 0.3, 0.8, 1.0, 5.2, 28.5, 115.0, 128.0, 127.99999999999999])
def test_a_search_from_the_power_of_two_below_the_ceiling_finds_what_one_from_1_finds(ceiling_per_s):
    """The default start (``capacity_search_start_per_s``) skips passing probes (whole runs) far below the
    capacity and brackets it between the same powers of two, so every capacity up to the ceiling comes out
    the same."""
    start = capacity_search_start_per_s(ceiling_per_s)
    assert math.log2(start).is_integer() and (start <= ceiling_per_s < 2 * start or start == 2.0 ** -8)
    top = capacity_search_top_per_s(ceiling_per_s)
    for capacity_per_s in (0.0005, 0.0012, 0.002, 0.04, 0.29, 0.75, 1.0, 3.3, 5.0, 17.0, 27.9, 112.0):
        if capacity_per_s > ceiling_per_s:
            continue

        def search(start_per_s: float, capacity_per_s: float = capacity_per_s):
            return find_capacity(lambda rate: Probe(rate, rate <= capacity_per_s), start_per_s, rel_tol=0.01,
                                 max_rate_per_s=top)

        from_one, from_start = search(1.0), search(start)
        assert (from_start.rate_per_s, from_start.failed_above_per_s) == \
            (from_one.rate_per_s, from_one.failed_above_per_s)
        assert sum(p.passed for p in from_start.probes) <= sum(p.passed for p in from_one.probes)


def test_the_default_start_needs_a_positive_finite_ceiling():
    assert capacity_search_start_per_s(0.0) == capacity_search_start_per_s(math.inf) == 1.0


def test_a_capacity_search_reaches_a_work_ceiling_above_the_default_top():
    """The code family on the measured-GPU cluster: ceiling 115/s, a policy passing up to 110/s."""
    def capacity(ceiling_per_s: float):
        return find_capacity(lambda rate: Probe(rate, rate <= 110.0), 1.0, rel_tol=0.01,
                             max_rate_per_s=capacity_search_top_per_s(ceiling_per_s))

    measured = capacity(115.0)
    assert 108.9 <= measured.rate_per_s <= 110.0 and not measured.search_bound
    assert capacity(60.0).search_bound and capacity(60.0).rate_per_s == MAX_RATE_PER_S


def test_fraction_runs_need_least_loads_capacity_on_the_same_seed():
    from types import SimpleNamespace

    spec = SimpleNamespace(loads={"capacity_fractions": [0.5]}, policies=["llm-d"], seeds=[1, 2], rivals={},
                           fractions_of="least-load")
    capacities = {("least-load", 1): SimpleNamespace(rate_per_s=2.0), ("llm-d", 1): SimpleNamespace(rate_per_s=3.0),
                  ("llm-d", 2): SimpleNamespace(rate_per_s=3.0)}   # a sweep narrowed with --policies on seed 2
    runs = Sweep.fraction_runs(SimpleNamespace(spec=spec), capacities)  # type: ignore[arg-type]
    assert [(r.policy, r.seed, r.rate_per_s) for r in runs] == [("llm-d", 1, 1.0)]


@pytest.mark.parametrize("path", sorted(Path("bench/sweeps").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_sweep_and_its_cluster_load(path):
    """A sweep names known policies and a cluster whose engines' profiles resolve (measured or roofline)."""
    spec = SweepSpec.from_yaml(path)
    assert cluster_from_stack(load_stack(Path(spec.cluster)))


def test_a_capacity_search_on_the_fast_path_takes_the_references_verdict_at_every_probe(tmp_path):
    """Decode runs (issue 32) against stepping every iteration: the same probes, the same pass or fail."""
    path = capacity_file(tmp_path, ["least-load", "hetflow"], family="agent", programs=30, rel_tol=0.1)
    spec = SweepSpec.from_yaml(path)
    found = [Sweep(spec, workers=1, decode_runs=fast).capacities() for fast in (False, True)]
    for key in found[0]:
        reference, fast = (f[key] for f in found)
        assert [(p.rate_per_s, p.passed, p.failures) for p in fast.probes] == \
            [(p.rate_per_s, p.passed, p.failures) for p in reference.probes]
        assert fast.rate_per_s == reference.rate_per_s


def test_each_run_says_how_retained_kv_was_let_go():
    from hetflow.workloads.generate import generate
    from simulator.signals import Signals

    engines = cluster_from_stack(CLUSTER)
    records = generate("agent", 30, seed=2, models=("qwen2.5-7b-instruct",), rate_per_s=1.0)
    large = [e for e in engines if e.model == "qwen2.5-7b-instruct"]
    kept = simulate(large, resolve("hetflow"), records, Signals("prior", "oracle"), 1.0)
    freed = simulate(large, resolve("hetflow-no-retention"), records, Signals("prior", "oracle"), 1.0)
    assert kept["retained_kv_released"]["resumed"] > 0
    assert freed["retained_kv_released"] == {"resumed": 0, "expired": 0, "pressure": 0}


def test_rel_tol_overrides_the_searchs_tolerance_and_needs_a_capacity_sweep(tmp_path):
    path = capacity_file(tmp_path, ["llm-d"], rel_tol=0.5)
    out = tmp_path / "out"
    assert main(["bench", "--sweep", str(path), "--workers", "1", "--rel-tol", "0.05", "-o", str(out)]) == 0
    result = json.loads((out / "results.json").read_text())
    capacity = result["capacity"][0]["capacity_per_s"][0]
    failed_above = min(p["rate_per_s"] for p in result["probes"]["llm-d@1"] if not p["passed"])
    assert capacity < failed_above <= capacity * 1.05 + 1e-9    # bracketed to 5%, not the file's 50%
    assert "--rel-tol 0.05" in result["command"]                # the figures say how they were searched
    for bad in ("0", "1.5"):
        with pytest.raises(SystemExit, match="rel-tol"):
            main(["bench", "--sweep", str(path), "--workers", "1", "--rel-tol", bad, "-o", str(out)])


def test_probes_stopped_once_settled_take_the_whole_runs_verdicts_and_capacity(tmp_path):
    """``--stop-settled`` (issue 32): a probe stops once its SLO failure is certain, so every probe keeps
    its rate and pass or fail, a passing probe its whole summary, and a stopped one says where it stopped."""
    path = capacity_file(tmp_path, ["llm-d", "vllm-router-program"], programs=120, rel_tol=0.1,
                         start_rate_per_s=16.0, slo_scale=2.0)  # a strict SLO, so that overload misses it
    spec = SweepSpec.from_yaml(path)
    found = [Sweep(spec, workers=1, stop_settled=stop).capacities() for stop in (False, True)]
    stopped = 0
    for key in found[0]:
        whole, settled = (f[key] for f in found)
        assert settled.rate_per_s == whole.rate_per_s
        for w, s in zip(whole.probes, settled.probes, strict=True):
            assert (s.rate_per_s, s.passed) == (w.rate_per_s, w.passed)
            if not w.summary:                   # above the work ceiling: failed without a run, both ways
                assert s.summary == {} and s.failures == w.failures
            elif "settled" in s.summary:
                stopped += 1
                assert BELOW_SLO in w.failures and BELOW_SLO in s.failures
                assert s.summary["settled"]["within_slo_share_at_most"] >= w.summary["within_slo_share"]
                assert s.summary["finished_programs"] < w.summary["programs"] and "latency_s" not in s.summary
            else:
                assert s.failures == w.failures and s.summary["latency_s"] == w.summary["latency_s"]
    assert stopped  # the search started above capacity, so at least one probe stopped early


def test_an_unknown_policy_on_the_command_line_stops_before_any_run(tmp_path):
    path = capacity_file(tmp_path, ["llm-d"])
    with pytest.raises(SystemExit, match="unknown policy 'max_active=3'"):
        main(["bench", "--sweep", str(path), "--workers", "1", "--policies", "llm-d,max_active=3",
              "-o", str(tmp_path / "out")])


def test_each_rival_is_its_grids_best_on_each_seed_and_the_fractions_follow_the_best_rival():
    """A handmade grid: seed 1 is won by the router's second setting, seed 2 by its first; llm-d's one setting
    is the best rival on seed 2 only; every policy and each rival's winner run at half the best rival's."""
    from types import SimpleNamespace

    from hetflow.bench.sweep import best_of_grids

    cap = {("hetflow", 1): 5.0, ("hetflow", 2): 5.0, ("r64", 1): 2.0, ("r256", 1): 3.0, ("r64", 2): 2.5,
           ("r256", 2): 1.0, ("llm-d", 1): 2.9, ("llm-d", 2): 4.0}
    capacities = {k: SimpleNamespace(rate_per_s=v) for k, v in cap.items()}
    rivals = {"vllm-router": ("r64", "r256"), "llm-d": ("llm-d",)}
    best = best_of_grids(capacities, rivals, [1, 2])        # type: ignore[arg-type]
    assert {r: {s: p for s, (p, _) in by.items()} for r, by in best.items()} == {
        "vllm-router": {1: "r256", 2: "r64"}, "llm-d": {1: "llm-d", 2: "llm-d"}}
    spec = SimpleNamespace(loads={"capacity_fractions": [0.5]}, policies=["hetflow"], seeds=[1, 2], rivals=rivals,
                           fractions_of="best-rival")
    runs = Sweep.fraction_runs(SimpleNamespace(spec=spec), capacities)  # type: ignore[arg-type]
    assert sorted((r.label or r.policy, r.policy, r.seed, r.rate_per_s) for r in runs) == sorted([
        ("hetflow", "hetflow", 1, 1.5), ("vllm-router", "r256", 1, 1.5), ("llm-d", "llm-d", 1, 1.5),
        ("hetflow", "hetflow", 2, 2.0), ("vllm-router", "r64", 2, 2.0), ("llm-d", "llm-d", 2, 2.0)])


def test_a_capacity_sweep_with_rivals_reports_each_grid_its_winners_and_every_task_score(tmp_path, capsys):
    path = capacity_file(tmp_path, ["hetflow"], rel_tol=0.3,
                         extra={"rivals": {"sglang": ["sglang", "sglang:cache_threshold=0.5"]},
                                "fractions_of": "best-rival"})
    out = tmp_path / "out"
    assert main(["bench", "--sweep", str(path), "--workers", "1", "-o", str(out)]) == 0
    result = json.loads((out / "results.json").read_text())
    (rival,) = result["rivals"]
    assert rival["rival"] == "sglang" and rival["grid"] == ["sglang", "sglang:cache_threshold=0.5"]
    by_policy = {r["policy"]: r for r in result["capacity"]}
    assert rival["capacity_per_s"] == [max(by_policy[p]["capacity_per_s"][0] for p in rival["grid"])]
    assert all(0.0 <= t <= 1.0 for r in result["capacity"] for t in r["task_score_at_capacity"])
    assert {r["policy"] for r in result["runs"]} == {"hetflow", "sglang"}
    assert {r["setting"] for r in result["runs"] if r["policy"] == "sglang"} == set(rival["winner"])
    assert {(r["load"], r["rate_per_s"]) for r in result["runs"]} == {
        ("50% of the best rival's capacity", 0.5 * rival["capacity_per_s"][0])}
    printed = capsys.readouterr().out
    assert "best of its grid" in printed and "vs the best rival per seed" in printed


def test_fractions_of_the_best_rival_need_rivals(tmp_path):
    path = capacity_file(tmp_path, ["hetflow"], extra={"fractions_of": "best-rival"})
    with pytest.raises(ValueError, match="fractions_of"):
        SweepSpec.from_yaml(path)


def test_a_resumed_capacity_sweep_runs_only_the_searches_its_journal_lacks(tmp_path):
    """Each search is journalled as it ends; --resume takes those of the same rule (an interrupted line is
    skipped) and runs the rest, with the same figures as a whole run; without --resume the journal restarts."""
    path = capacity_file(tmp_path, ["llm-d", "sglang"], rel_tol=0.3)
    out = tmp_path / "out"
    assert main(["bench", "--sweep", str(path), "--workers", "1", "-o", str(out)]) == 0
    journal = out / "capacity-searches.jsonl"
    whole = json.loads((out / "results.json").read_text())["capacity"]
    lines = journal.read_text().splitlines()
    assert [json.loads(line)["policy"] for line in lines] == ["llm-d", "sglang"]
    journal.write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])   # sglang's line cut off mid-write
    assert main(["bench", "--sweep", str(path), "--workers", "1", "-o", str(out), "--resume"]) == 0
    assert [json.loads(line)["policy"] for line in journal.read_text().splitlines()[2:]] == ["sglang"]  # after the cut
    assert json.loads((out / "results.json").read_text())["capacity"] == whole
    (tmp_path / "other").mkdir()
    other_rule = capacity_file(tmp_path / "other", ["llm-d"], rel_tol=0.5)     # another rule: nothing reused
    assert main(["bench", "--sweep", str(other_rule), "--workers", "1", "-o", str(out), "--resume"]) == 0
    assert json.loads(journal.read_text().splitlines()[-1])["policy"] == "llm-d"
    assert main(["bench", "--sweep", str(path), "--workers", "1", "-o", str(out)]) == 0   # not resumed: afresh
    assert len(journal.read_text().splitlines()) == 2


def test_a_journals_search_is_resumed_only_for_the_policy_as_it_runs_today(tmp_path):
    """A line whose policy ran with other parameters (a default since changed) is searched again; a line
    written before the hash was kept is taken as it is."""
    path = capacity_file(tmp_path, ["llm-d", "sglang"], rel_tol=0.3)
    out = tmp_path / "out"
    assert main(["bench", "--sweep", str(path), "--workers", "1", "-o", str(out)]) == 0
    journal = out / "capacity-searches.jsonl"
    llm_d, sglang = (json.loads(line) for line in journal.read_text().splitlines())
    llm_d["policy_hash"] = "an-older-one"                  # llm-d's parameters have changed since
    del sglang["policy_hash"]                              # written before the hash was kept
    journal.write_text(json.dumps(llm_d) + "\n" + json.dumps(sglang) + "\n")
    assert main(["bench", "--sweep", str(path), "--workers", "1", "-o", str(out), "--resume"]) == 0
    rerun = [json.loads(line) for line in journal.read_text().splitlines()[2:]]
    assert [line["policy"] for line in rerun] == ["llm-d"] and rerun[0]["policy_hash"] == policy_hash("llm-d")


def test_so_far_prints_the_seeds_every_setting_finished_on_and_runs_nothing(tmp_path, capsys):
    path = capacity_file(tmp_path, ["llm-d", "sglang"], seeds=(1, 2), rel_tol=0.3)
    out = tmp_path / "out"
    assert main(["bench", "--sweep", str(path), "--workers", "1", "-o", str(out)]) == 0
    journal = out / "capacity-searches.jsonl"
    journal.write_text("\n".join(journal.read_text().splitlines()[:3]) + "\n")   # seed 2's sglang not yet done
    capsys.readouterr()
    assert main(["bench", "--sweep", str(path), "-o", str(out), "--so-far"]) == 0
    printed = capsys.readouterr().out
    assert "3 of 4 searches" in printed and "finished on: [1]" in printed and "| llm-d |" in printed
    assert len(journal.read_text().splitlines()) == 3                              # nothing ran


def test_the_semantic_router_asks_the_router_about_a_programs_first_call_only():
    """The learned router scores first calls only (as the balancer asks it); a picker that asked about every
    call stopped frontier-code's sweep with a KeyError on a second stage."""
    from hetflow.workloads.generate import generate
    from simulator.signals import LearnedSignals, Signals

    engines = cluster_from_stack(CLUSTER)
    models = sorted({e.model for e in engines})
    records = generate("code", 20, seed=1, models=models, rate_per_s=1.0)
    first_calls = {(r.program_id, r.stage_index): {m: 0.5 for m in models} for r in records if not r.depends_on}
    signals = Signals("learned", "oracle", CLUSTER["router"]["models"], LearnedSignals(confidence=first_calls))
    as_in_a_sweep = replace(resolve("semantic-router"), confidence="router")   # a sweep's definition reads it
    summary = simulate(engines, as_in_a_sweep, records, signals, 1.0)
    assert summary["programs"] == 20 and summary["task_score"] is not None


def test_a_ceilings_sweep_searches_the_bases_capacity_alone_and_runs_each_router_at_its_fraction(tmp_path):
    """``searched: base``: least load's capacity alone is searched, and each policy (here hetflow's model stage
    under the oracle routers, defined on its base) runs at the fraction of it; the runs' confidences are the
    oracles' (the outcome oracle's are each call's answer, so its score is the highest)."""
    policies = ["least-load", {"name": "hetflow-outcome-oracle-t", "base": "hetflow", "confidence": "oracle"},
                {"name": "hetflow-visible-oracle-t", "base": "hetflow", "confidence": "visible-probability"},
                "hetflow-outcome-oracle-t:latency_slack=3.0", "hetflow-visible-oracle-t:latency_slack=3.0"]
    path = capacity_file(tmp_path, policies, rel_tol=0.3, extra={"searched": "base"})
    spec = SweepSpec.from_yaml(path)
    assert spec.capacity_policies == ("least-load",) and spec.searched_policies == ("least-load",)
    out = tmp_path / "out"
    assert main(["bench", "--sweep", str(path), "--workers", "1", "-o", str(out)]) == 0
    result = json.loads((out / "results.json").read_text())
    assert [r["policy"] for r in result["capacity"]] == ["least-load"]
    score = {r["policy"]: r["task_score"] for r in result["runs"]}
    assert len(score) == 5 and all(r["load"] == "50% of least-load capacity" for r in result["runs"])
    assert score["hetflow-outcome-oracle-t:latency_slack=3.0"] >= score["hetflow-visible-oracle-t:latency_slack=3.0"]
    assert score["hetflow-outcome-oracle-t:latency_slack=3.0"] > score["least-load"]


def test_which_policies_are_searched_leaves_the_journals_rule_alone(tmp_path):
    from hetflow.bench.sweep import rule_key

    path = capacity_file(tmp_path, ["least-load", "hetflow"])
    spec = SweepSpec.from_yaml(path)
    assert rule_key(replace(spec, searched="base")) == rule_key(spec)
    path.write_text(path.read_text() + "searched: some\n")
    with pytest.raises(ValueError, match="searched"):
        SweepSpec.from_yaml(path)


def test_a_policy_reading_the_router_through_one_difficulty_reads_the_learned_router_so_and_nothing_else():
    from hetflow.core.presets import define
    from simulator.signals import Signals, signals_for

    raw = define({"name": "hetflow-raw-reading-sweep", "base": "hetflow", "confidence": "router"}, "t.yaml")
    assert signals_for(resolve("hetflow"), Signals("learned")).confidence == "learned-one-difficulty"
    assert signals_for(raw, Signals("learned")).confidence == "learned"
    for source in ("prior", "oracle", "probability"):          # the priors read so are themselves; oracles unread
        assert signals_for(resolve("hetflow"), Signals(source)).confidence == source
