"""Re-planning (Cascadia 4.4): a shift is named by what moved; a rollout goes one engine at a time, within
the GPU budget, and never takes the last engine of a model the cascade routes to."""

import random

import pytest

from hetflow.planner.replan import (
    ADD,
    REMOVE,
    SWITCH,
    Replica,
    ShiftRule,
    WorkloadProfile,
    rollout,
    shift,
)

PLANNED = WorkloadProfile(10.0, 500.0, 200.0, 60.0, 50)


@pytest.mark.parametrize("live, named", [
    (WorkloadProfile(14.0, 500.0, 200.0, 60.0, 50), "arrival rate 10 -> 14 (+40%"),
    (WorkloadProfile(10.0, 300.0, 200.0, 60.0, 50), "mean input tokens"),
    (WorkloadProfile(10.0, 500.0, 300.0, 60.0, 50), "mean output tokens"),
    (WorkloadProfile(10.0, 500.0, 200.0, 45.0, 50), "c_1's mean grade 60.0 -> 45.0"),
])
def test_a_shift_names_what_moved(live, named):
    [reason] = shift(PLANNED, live)
    assert named in reason


def test_small_moves_and_too_few_samples_are_not_a_shift():
    assert shift(PLANNED, WorkloadProfile(11.0, 550.0, 180.0, 55.0, 50)) == []
    assert shift(PLANNED, WorkloadProfile(40.0, 500.0, 200.0, 60.0, 5)) == []
    assert shift(PLANNED, WorkloadProfile(11.0, 500.0, 200.0, 60.0, 50), ShiftRule(rate=0.05)) != []


def replay(running, steps, budget, old_models, new_models):
    """Apply the steps, checking after each that GPUs fit and every served model has an engine."""
    engines, served = dict(running), set(old_models)
    for step in steps:
        if step.action == SWITCH:
            served = set(new_models)
        elif step.action == ADD:
            engines[step.engine] = step.replica
        else:
            assert step.action == REMOVE
            del engines[step.engine]
        assert sum(r.gpus for r in engines.values()) <= budget
        assert served <= {r.model for r in engines.values()}, step
    return engines


def test_more_small_engines_and_fewer_large_ones_one_at_a_time():
    small, large = Replica("small"), Replica("large", tp=2)
    running = {"small-0": small, "large-0": large, "large-1": large}
    out = rollout(running, [small, small, small, large], 5, ["small", "large"], ["small", "large"])
    assert not out.blocked
    assert [st.action for st in out.steps] == [SWITCH, REMOVE, ADD, ADD]  # nothing free until a large one goes
    final = replay(running, out.steps, 5, ["small", "large"], ["small", "large"])
    assert sorted(r.model for r in final.values()) == ["large", "small", "small", "small"]


def test_a_model_the_new_plan_drops_keeps_its_engine_until_the_cascade_has_switched():
    s, m, big = Replica("s"), Replica("m"), Replica("l")
    running = {"s-0": s, "m-0": m, "l-0": big}
    out = rollout(running, [s, s, m], 3, ["s", "m", "l"], ["s", "m"])
    actions = [(st.action, st.engine) for st in out.steps]
    assert actions.index((SWITCH, "")) < actions.index((REMOVE, "l-0"))
    replay(running, out.steps, 3, ["s", "m", "l"], ["s", "m"])


def test_a_change_of_parallelism_that_needs_the_models_only_engine_is_blocked_not_done():
    running = {"large-0": Replica("large", tp=2), "small-0": Replica("small", tp=2)}
    out = rollout(running, [Replica("large", tp=4)], 4, ["small", "large"], ["large"])
    assert out.blocked and all(st.action != REMOVE or st.engine != "large-0" for st in out.steps)
    replay(running, out.steps, 4, ["small", "large"], ["large"])


@pytest.mark.parametrize("seed", range(40))
def test_random_rollouts_never_leave_a_served_model_without_an_engine(seed):
    rng = random.Random(seed)
    kinds = [Replica(m, tp) for m in ("a", "b", "c") for tp in (1, 2)]
    budget = rng.randint(4, 10)
    running: dict[str, Replica] = {}
    while True:
        r = rng.choice(kinds)
        if sum(x.gpus for x in running.values()) + r.gpus > budget:
            break
        running[f"e{len(running)}"] = r
    target, used = [], 0
    for r in rng.sample(kinds * 3, len(kinds) * 3):
        if used + r.gpus <= budget:
            target.append(r)
            used += r.gpus
    old = sorted({r.model for r in running.values()})
    new = sorted({r.model for r in target})
    out = rollout(running, target, budget, old, new)
    final = replay(running, out.steps, budget, old, new)
    if not out.blocked:
        assert sorted(final.values(), key=repr) == sorted(target, key=repr)
