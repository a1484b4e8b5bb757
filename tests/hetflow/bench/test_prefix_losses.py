"""Where a run's prefix hits went: each call sorted by where it ran against its program's previous call; where the
late programs' time went."""

from hetflow.bench.prefix_losses import LossRow, call_kind, late_by_decile, late_table, prefix_losses, table
from simulator.run import ProgramResult, SimulatedCall


def call(stage: int, engine: str, dispatched_s: float, prompt: int, hit: int) -> SimulatedCall:
    return SimulatedCall(stage, engine, dispatched_s, dispatched_s, dispatched_s + 1, 10, 0,
                         prompt_tokens=prompt, prefix_hit_tokens=hit)


def program(program_id: str, *calls: SimulatedCall) -> ProgramResult:
    return ProgramResult(program_id, "agent", 0.0, calls={c.stage_index: c for c in calls})


def test_a_call_is_first_moved_or_on_its_programs_engine_by_the_share_of_its_prompt_cached():
    assert call_kind(1000, 100, first=True, moved=False) == "first"
    assert call_kind(1000, 900, first=False, moved=True) == "moved"
    assert call_kind(1000, 600, first=False, moved=False) == "same engine, >= 60% cached"
    assert call_kind(1000, 599, first=False, moved=False) == "same engine, 20-60% cached"
    assert call_kind(1000, 0, first=False, moved=False) == "same engine, < 20% cached"
    assert call_kind(1000, 2500, first=False, moved=False) == "same engine, >= 60% cached"  # preempted, re-hit


def test_calls_are_compared_with_their_programs_previous_call_in_dispatch_order():
    kept = program("kept", call(1, "e0", 0.0, 500, 100), call(2, "e0", 5.0, 800, 700))
    evicted = program("evicted", call(2, "e1", 9.0, 900, 50), call(1, "e1", 1.0, 400, 0))  # stage 1 first
    moved = program("moved", call(1, "e0", 0.0, 300, 0), call(2, "e1", 4.0, 600, 0))
    rows = prefix_losses([kept, evicted, moved])
    assert rows["first"] == LossRow(3, 1200, 1100)
    assert rows["same engine, >= 60% cached"] == LossRow(1, 800, 100)
    assert rows["same engine, < 20% cached"] == LossRow(1, 900, 850)
    assert rows["moved"] == LossRow(1, 600, 600)
    text = table(rows, {"resumed": 1, "expired": 2})
    assert "prefix hits 24.3%" in text and "expired 2, resumed 1" in text   # 1 - 2,650 prefilled / 3,500


def timed(program_id: str, exclusive_s: float, latency_s: float, held_s: float, queued_s: float,
          parallel: bool = False) -> ProgramResult:
    """A program held ``held_s`` at the gate, then queued the rest of ``queued_s`` in an engine; with
    ``parallel``, a second stage beside it waited the same intervals."""
    def waited(stage: int) -> SimulatedCall:
        return SimulatedCall(stage, "e0", 0.0, queued_s, latency_s, 10, 0,
                             queued_intervals_s=[(0.0, held_s), (held_s, queued_s)], held_intervals_s=[(0.0, held_s)])
    calls = {1: waited(1), 2: waited(2)} if parallel else {1: waited(1)}
    return ProgramResult(program_id, "agent", 0.0, finished_s=latency_s, isolated_s=exclusive_s, calls=calls)


def test_late_programs_are_counted_by_decile_of_exclusive_latency_with_their_time_held_and_queued():
    short = [timed(f"s{i}", 10.0, 20.0, 0.0, 2.0) for i in range(10)]
    starved = [timed(f"m{i}", 50.0, 400.0, 300.0, 310.0, parallel=i % 2 == 0) for i in range(10)]  # late: held
    rows = late_by_decile(short + starved, slo_scale=5.0)
    assert [r.decile for r in rows] == list(range(1, 11)) and [r.programs for r in rows] == [2] * 10
    assert [r.late for r in rows] == [0] * 5 + [2] * 5
    assert rows[0].mean_slowdown == 2.0 and rows[0].held_share == 0.0 and rows[0].engine_queue_share == 0.1
    # parallel stages waiting together count once: the shares stay those of one stage
    assert rows[9].mean_exclusive_s == 50.0 and rows[9].held_share == 0.75 and rows[9].engine_queue_share == 0.025
    assert "| 10 | 2 | 50.0 | 2 | 8.00 | 75% | 2% |" in late_table(rows)


def test_deciles_of_fewer_than_ten_programs_keep_their_numbers():
    rows = late_by_decile([timed(f"p{i}", 10.0 + i, 20.0, 0.0, 1.0) for i in range(3)], slo_scale=5.0)
    assert [r.decile for r in rows] == [4, 7, 10]
