"""Held-out programs for the learned models' metrics: whole programs, never one on both sides."""

from dataclasses import dataclass

from hetflow.core.trace import StageRecord, agent_calls_again, split_by_program


@dataclass(frozen=True)
class Call:
    program_id: str
    stage: int


def test_held_out_programs_are_never_trained_on():
    calls = [Call(f"p{i}", stage) for i in range(50) for stage in (1, 2)]
    fitted, held = split_by_program(calls, 0.3, seed=1)
    assert {c.program_id for c in fitted}.isdisjoint({c.program_id for c in held})
    assert len({c.program_id for c in held}) == 15 and len(fitted) + len(held) == 100
    assert split_by_program(calls[:2], 0.3, seed=1)[1] == calls[:2]  # at least one program is held out


def test_an_agent_calls_again_while_a_later_stage_of_its_program_is_its_own():
    def stage(index: int, agent: str) -> StageRecord:
        return StageRecord("p", "agent", "loop", index, 4, agent, "", [], "", "", {"m": 10}, {"m": 5}, {}, 0.0)

    program = [stage(1, "planner"), stage(2, "coder"), stage(3, "qa"), stage(4, "coder")]
    assert [agent_calls_again(program, r) for r in program] == [False, True, False, False]
