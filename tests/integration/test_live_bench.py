"""``hetflow bench --live``'s replay on an in-process stack of sim engines: dependencies respected,
each program measured, bounded by its duration; and a named policy applied to the live stack."""

from hetflow.bench.cluster import cluster_from_stack
from hetflow.bench.live import replay
from hetflow.core.presets import apply_to_stack, resolve
from hetflow.workloads.generate import generate
from simulator.metrics import summarize
from tests.integration.harness import LARGE, SMALL, stack_config, start_stack


async def test_replay_runs_each_program_after_its_dependencies_and_stops_at_the_duration():
    raw = apply_to_stack(stack_config(), resolve("mlfq"))
    stack = await start_stack(raw)
    try:
        assert all(s.backend._scheduler.queue.__class__.__name__ == "MlfqQueue"
                   for s in stack.engine_servicers.values())
        records = generate("sql", 12, seed=2, models=(SMALL, LARGE), rate_per_s=4.0)
        for r in records:   # short calls: the sim engines run in real time
            r.output_tokens = {m: min(v, 12) for m, v in r.output_tokens.items()}
        duration = sorted({r.arrival_s for r in records})[7] + 1e-6        # the first 8 programs arrive in time
        results, decision_ms, errors = await replay(stack.address("balancer"), records, duration, 60.0,
                                            cluster_from_stack(raw))
    finally:
        await stack.close()
    assert not errors and len(results) == 8 and len(decision_ms) == sum(len(r.calls) for r in results)
    by_program = {r.program_id: r for r in results}
    for record in records:
        if record.program_id not in by_program:
            continue
        calls = by_program[record.program_id].calls
        for dep in record.depends_on:
            assert calls[dep].finished_s <= calls[record.stage_index].dispatched_s
    summary = summarize(results, decision_ms)
    assert summary["programs"] == 8 and summary["scheduler_overhead_ms"]["mean"] > 0


def test_live_bench_with_policies_refuses_a_stack_that_is_already_up(monkeypatch, capsys):
    from hetflow import cli, stackctl

    monkeypatch.setattr(stackctl, "read_state", lambda raw: {"supervisor_pid": 1})
    code = cli.main(["bench", "--live", "--policies", "llm-d,hetflow", "-c", "examples/local-sim.yaml"])
    assert code == 2 and "already up" in capsys.readouterr().err
