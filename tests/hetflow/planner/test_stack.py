"""A plan as a stack: every service's config reads it, the cascade keeps the planned thresholds, and the
compose file reserves each replica's tensor x pipeline GPUs."""

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from balancer_svc.config import from_stack as balancer_config
from engine_svc.backends.sim import sim_backend
from engine_svc.config import from_stack as engine_config
from hetflow.core.engine.aging_queue import AgingPriorityQueue
from hetflow.core.engine.profile import load_profile
from hetflow.deploy.compose import compose_file
from hetflow.planner.bilevel import Plan
from hetflow.planner.deployment import Allocation
from hetflow.planner.parallelism import Parallelism
from hetflow.planner.stack import StackSettings, stack_config
from hetflow.runtime.config import check_sections

REPO = Path(__file__).resolve().parents[3]
SCHEMA = jsonschema.Draft7Validator(json.loads((REPO / "tests" / "data" / "compose-spec.json").read_text()))
S, M, L = "qwen2.5-1.5b-instruct", "qwen2.5-7b-instruct", "qwen2.5-14b-instruct"
DIRS = {S: "Qwen/Qwen2.5-1.5B-Instruct", M: "Qwen/Qwen2.5-7B-Instruct", L: "Qwen/Qwen2.5-14B-Instruct"}


def a_plan(large_gpus: int = 4) -> Plan:
    allocations = [Allocation(S, "h100-80g", 2, Parallelism(2, 1, 1), 0.5),
                   Allocation(M, "h100-80g", 2, Parallelism(1, 2, 1), 0.9),
                   Allocation(L, "h100-80g", large_gpus, Parallelism(1, 2, 2) if large_gpus else None, 1.2)]
    return Plan(thresholds=[72.5, 61.0], processed_share=[1.0, 0.4, 0.1 if large_gpus else 0.0],
                allocations=allocations, p95_s=1.2, quality=80.0, objective=0.1, utopia=85.0, nadir=60.0,
                iterations=3, evaluated=10, runtime_s=1.0)


def test_the_stack_serves_the_planned_cascade_with_its_thresholds_and_replicas():
    raw = stack_config(a_plan(), StackSettings(model_dirs=DIRS), {S: 0.6, M: 0.7, L: 0.8})
    check_sections(raw, "plan")
    cascade = balancer_config(raw).cascade
    assert cascade is not None and cascade.models == (S, M, L) and cascade.thresholds == (72.5, 61.0)
    assert cascade.judge.kind == "llm" and cascade.judge.model == L
    engines = [engine_config(raw, e["name"]) for e in raw["engines"]]
    assert [e.model for e in engines] == [S, S, M, L]  # DP=2 of the small model: two engines
    assert [(e.vllm.tensor_parallel_size, e.vllm.pipeline_parallel_size) for e in engines] == [(1, 1)] * 2 + [
        (2, 1), (2, 2)]
    small, tp2 = load_profile(engines[0].profile), load_profile(engines[2].profile)
    assert small.name == f"{S}@h100-80g" and tp2.name == f"{M}@h100-80g:tp2pp1"
    assert tp2.decode_base_ms < load_profile(f"{M}@h100-80g/roofline").decode_base_ms  # half the weights per GPU
    assert small.operator_tables is None  # the roofline the plan was made with
    assert len({e.serve.port for e in engines}) == 4


def test_the_compose_file_reserves_tensor_times_pipeline_gpus_per_replica_and_validates():
    raw = stack_config(a_plan(), StackSettings(model_dirs=DIRS), {})
    doc = compose_file(raw, "./stack.yaml")
    SCHEMA.validate(yaml.safe_load(yaml.safe_dump(doc)))
    devices = [s["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"]
               for s in doc["services"].values() if "deploy" in s]
    assert devices == [["0"], ["1"], ["2", "3"], ["4", "5", "6", "7"]]


def test_a_model_type_without_gpus_leaves_the_cascade_and_a_sim_stack_starts_its_engines():
    raw = stack_config(a_plan(large_gpus=0), StackSettings(backend="sim"), {})
    cascade = balancer_config(raw).cascade
    assert cascade is not None and cascade.models == (S, M) and cascade.thresholds == (72.5,)
    assert cascade.judge.model == M
    for engine in raw["engines"]:  # the inline profiles build sim engines
        cfg = engine_config(raw, engine["name"])
        assert sim_backend(cfg, AgingPriorityQueue()).status().waiting == 0


def test_vllm_engines_need_their_weights_named():
    with pytest.raises(ValueError, match="model_dirs.*qwen2.5-7b-instruct"):
        stack_config(a_plan(), StackSettings(model_dirs={S: "x", L: "y"}), {})
