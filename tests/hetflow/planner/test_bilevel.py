"""Cascadia's Algorithm 1 end to end on a small cascade, and the errors that name the constraint."""

import math
import random

import pytest

from hetflow.core.engine.profile import catalog_architecture, catalog_gpu
from hetflow.planner.bilevel import PlanError, Requirement, plan
from hetflow.planner.deployment import LatencyTable, ModelType
from hetflow.planner.routing import SampledRequest

NAMES = ["qwen2.5-1.5b-instruct", "qwen2.5-7b-instruct"]
MODELS = [ModelType(n, catalog_architecture(n)) for n in NAMES]


def sample(n=40, seed=0):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        difficulty = rng.gauss(0, 1)
        scores = {name: 100 / (1 + math.exp(1.7 * (difficulty - ability))) for name, ability in zip(NAMES, (0.0, 1.0))}
        out.append(SampledRequest({m: rng.randint(100, 800) for m in NAMES}, {m: rng.randint(20, 200) for m in NAMES},
                                  scores))
    return out


def table(gpus=3):
    return LatencyTable({"h100-80g": catalog_gpu("h100-80g")}, {"h100-80g": gpus}, sim_requests=40)


def test_the_plan_meets_the_quality_requirement_within_the_budget_and_escalates_only_some_requests():
    requests = sample()
    result = plan(MODELS, requests, 4.0, table(), Requirement(q_min=62.0, stable_iterations=2, max_iterations=8))
    assert result.quality >= 62.0 and result.nadir < 62.0 <= result.utopia and result.meets_q_min
    assert sum(a.gpus for a in result.allocations) <= 3
    assert result.processed_share[0] == 1.0 and 0 < result.processed_share[1] < 1
    assert math.isfinite(result.p95_s) and result.p95_s == max(a.p95_s for a in result.allocations)
    assert result.history == sorted(result.history, reverse=True)  # the best J never gets worse


def test_a_looser_requirement_escalates_fewer_requests():
    requests = sample()
    strict = plan(MODELS, requests, 4.0, table(), Requirement(q_min=64.0, stable_iterations=2, max_iterations=8))
    loose = plan(MODELS, requests, 4.0, table(), Requirement(q_min=52.0, stable_iterations=2, max_iterations=8))
    assert loose.processed_share[1] < strict.processed_share[1]


@pytest.mark.parametrize("q_min, requests, rate, gpus, message", [
    (99.0, None, 4.0, 3, "above the utopia point"),
    (60.0, [], 4.0, 3, "workload sample is empty"),
    (60.0, None, 0.0, 3, "arrival rate must be positive"),
])
def test_bad_input_is_an_error_naming_the_constraint(q_min, requests, rate, gpus, message):
    with pytest.raises(PlanError, match=message):
        plan(MODELS, sample() if requests is None else requests, rate, table(gpus), Requirement(q_min=q_min))


def test_a_model_that_fits_no_allocation_is_named():
    big = [MODELS[0], ModelType("qwen2.5-72b-instruct", catalog_architecture("qwen2.5-72b-instruct"))]
    requests = [SampledRequest({m.name: 100 for m in big}, {m.name: 10 for m in big},
                               {big[0].name: 40.0, big[1].name: 90.0})]
    with pytest.raises(PlanError, match=r"qwen2.5-72b-instruct \(135 GiB of weights\) fits no allocation"):
        plan(big, requests, 1.0, table(1), Requirement(q_min=50.0))


def test_exhaustive_search_is_never_beaten_and_the_bi_level_loop_comes_within_a_tenth_of_it():
    from hetflow.planner.bilevel import exhaustive
    from hetflow.planner.routing import threshold_levels

    requests = sample(n=30, seed=3)
    requirement = Requirement(q_min=60.0, stable_iterations=2, max_iterations=8)
    best = exhaustive(MODELS, requests, 4.0, table(2), requirement)
    found = plan(MODELS, requests, 4.0, table(2), requirement)
    assert best.evaluated == len(threshold_levels(requests, NAMES[0]))  # every level of h_1
    assert best.objective <= found.objective <= 1.1 * best.objective


def test_an_llm_judge_on_the_pool_loads_its_model_type_with_a_call_per_graded_answer():
    from hetflow.planner.bilevel import JudgeLoad, _workloads
    from hetflow.planner.deployment import ModelType
    from hetflow.planner.routing import SampledRequest

    names = ["s", "l"]
    models = [ModelType(n, None) for n in names]  # type: ignore[arg-type]
    sample = [SampledRequest({n: 100 for n in names}, {n: 50 for n in names}, {"s": g, "l": 90.0})
              for g in (10.0, 80.0)]
    without = _workloads(models, sample, 4.0, [50.0])
    with_judge = _workloads(models, sample, 4.0, [50.0], JudgeLoad("l", prompt_tokens=80))
    assert [w.rate_per_s for w in without] == [4.0, 2.0]  # one of two forwarded
    assert [w.rate_per_s for w in with_judge] == [4.0, 6.0]  # and both of c_1's answers judged on l
    judged = [x for x in with_judge[1].lengths if x.output_tokens == 2]
    assert len(judged) == 2 and all(x.input_tokens == 100 + 50 + 80 for x in judged)


def test_a_judge_whose_load_the_budget_cannot_carry_makes_a_plan_that_says_it_falls_short():
    from hetflow.planner.bilevel import JudgeLoad
    from hetflow.planner.cli import summary

    requests = sample()
    squeezed = plan(MODELS, requests, 45.0, table(2), Requirement(q_min=64.0, stable_iterations=2, max_iterations=6),
                    JudgeLoad(NAMES[-1]))
    assert not squeezed.meets_q_min and "falls short of q_min 64" in summary(squeezed)
