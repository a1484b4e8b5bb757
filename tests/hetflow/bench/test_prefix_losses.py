"""Where a run's prefix hits went: each call sorted by where it ran against its program's previous call."""

from hetflow.bench.prefix_losses import LossRow, call_kind, prefix_losses, table
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
