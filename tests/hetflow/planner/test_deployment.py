"""The deployment solver (Cascadia 3.2): the MILP keeps to the budget and memory and finds the same
allocation as brute force on small cases; an impossible budget is an error that names the model."""

import itertools
import math

import pytest

from hetflow.core.engine.profile import catalog_architecture, catalog_gpu
from hetflow.planner.deployment import Infeasible, LatencyTable, ModelType, Workload, solve
from hetflow.planner.latency import LengthSample
from hetflow.planner.parallelism import Parallelism

H100 = {"h100-80g": catalog_gpu("h100-80g")}
LENGTHS = (LengthSample(400, 120), LengthSample(900, 300), LengthSample(150, 60))


class HandmadeTable(LatencyTable):
    """l_i(g, f) given outright (inf: the allocation cannot hold or serve the model)."""

    def __init__(self, budget, latencies):
        super().__init__(gpus={g: catalog_gpu("h100-80g") for g in budget}, budget=budget)
        self.latencies = latencies

    def column(self, model, gpu_name, workload):
        return [(lat, Parallelism(f, 1, 1) if math.isfinite(lat) else None)
                for f, lat in enumerate(self.latencies[model.name][gpu_name], start=1)]


def models(*names):
    return [ModelType(n, catalog_architecture("qwen2.5-7b-instruct")) for n in names]


def brute_force(names, budget, latencies):
    best = math.inf
    options = [[(g, f, lat) for g in budget for f, lat in enumerate(latencies[n][g], start=1) if math.isfinite(lat)]
               for n in names]
    for combo in itertools.product(*options):
        if all(sum(f for g2, f, _ in combo if g2 == g) <= n for g, n in budget.items()):
            best = min(best, max(lat for _, _, lat in combo))
    return best


@pytest.mark.parametrize("seed", range(6))
def test_the_milp_equals_brute_force_and_keeps_to_every_gpu_types_budget(seed):
    import random

    rng = random.Random(seed)
    budget = {"a": 4, "b": 3}
    names = ["small", "medium", "large"]
    latencies = {n: {g: [rng.uniform(1, 20) / f ** rng.uniform(0.3, 1.0) if rng.random() > 0.2 else math.inf
                         for f in range(1, budget[g] + 1)] for g in budget} for n in names}
    workloads = [Workload(1.0, LENGTHS)] * 3
    expected = brute_force(names, budget, latencies)
    if not math.isfinite(expected):
        with pytest.raises(Infeasible):
            solve(models(*names), workloads, HandmadeTable(budget, latencies))
        return
    largest, allocations = solve(models(*names), workloads, HandmadeTable(budget, latencies))
    assert largest == pytest.approx(expected)
    for g, n in budget.items():
        assert sum(a.gpus for a in allocations if a.gpu == g) <= n
    assert all(math.isfinite(a.p95_s) for a in allocations)


def test_a_model_type_without_requests_may_take_no_gpus():
    latencies = {"small": {"a": [5.0, 3.0]}, "large": {"a": [9.0, 6.0]}}
    largest, allocations = solve(models("small", "large"), [Workload(2.0, LENGTHS), Workload(0.0, ())],
                                 HandmadeTable({"a": 2}, latencies))
    assert largest == 3.0 and [a.gpus for a in allocations] == [2, 0] and allocations[1].parallelism is None


def test_the_simulated_table_holds_the_72b_only_on_enough_gpus_and_more_gpus_never_hurt():
    table = LatencyTable(H100, {"h100-80g": 4}, sim_requests=60)
    column = table.column(ModelType("qwen2.5-72b-instruct", catalog_architecture("qwen2.5-72b-instruct")),
                          "h100-80g", Workload(0.5, LENGTHS))
    assert column[0] == (math.inf, None)  # 145 GB of weights on one 80 GB GPU
    assert all(math.isfinite(lat) and s.tp * s.pp * s.dp <= f for f, (lat, s) in enumerate(column[1:], start=2))
    assert column[3][0] <= column[1][0]


def test_a_model_that_fits_no_allocation_is_an_error_naming_it_and_the_budget():
    table = LatencyTable(H100, {"h100-80g": 1}, sim_requests=20)
    with pytest.raises(Infeasible, match=r"qwen2.5-72b-instruct .*fits no allocation .*'h100-80g': 1"):
        solve([ModelType("qwen2.5-72b-instruct", catalog_architecture("qwen2.5-72b-instruct"))],
              [Workload(1.0, LENGTHS)], table)
