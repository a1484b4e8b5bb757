"""The decision pipeline's composition: engine-first routers choose an engine of any model."""

from dataclasses import replace

import pytest

from hetflow.core.errors import ResourceExhausted, Unavailable
from hetflow.core.pipeline import Pipeline
from hetflow.core.policies.contracts import Prediction
from hetflow.core.policy_config import StageConfig
from hetflow.core.presets import resolve
from tests.factories import call, engine, snapshot


def test_an_engine_first_router_chooses_among_every_models_engines_and_the_model_follows():
    pipeline = Pipeline(resolve("dynamo").policy)
    prompt = replace(call(input_tokens=64), prefix_blocks=(1, 2, 3, 4))
    small = replace(engine("small-0", "small"), kv_capacity_tokens=1600, kv_cache_usage=0.5)
    large = replace(engine("large-0", "large"), kv_capacity_tokens=1600, prefix_match_blocks=4)
    view = snapshot(small, large)
    predictions = {m: (Prediction(10.0), "") for m in ("large", "small")}
    decision = pipeline.decide(prompt, view, pipeline.candidate_models(prompt, view), {}, predictions,
                               router_asked=False)
    assert (decision.model, decision.engine_id) == ("large", "large-0")
    assert [s.stage for s in decision.stages] == ["model", "engine", "priority", "retention", "reserve"]
    assert decision.stages[0].choice.rule == "engine-first" and set(decision.stages[1].choice.scores) == {
        "small-0", "large-0"}


def test_a_pinned_call_stays_on_its_model_under_an_engine_first_router():
    pipeline = Pipeline(resolve("llm-d").policy)
    view = snapshot(engine("small-0", "small"), engine("large-0", "large"))
    pinned = replace(call(), model_pin="small")
    decision = pipeline.decide(pinned, view, ["small"], {}, {"small": (Prediction(1.0), "")}, router_asked=False)
    assert (decision.model, decision.engine_id) == ("small", "small-0")


def test_a_model_whose_engines_could_never_hold_the_call_is_not_a_candidate():
    pipeline = Pipeline(resolve("hetflow").policy)
    big_call = call(input_tokens=50_000)  # + max_tokens 16
    small = replace(engine("small-0", "small"), kv_capacity_tokens=120_000)
    large = replace(engine("large-0", "large"), kv_capacity_tokens=40_000)
    assert pipeline.candidate_models(big_call, snapshot(small, large)) == ["small"]
    # even the model its program is assigned to yields: served elsewhere rather than refused
    assert pipeline.candidate_models(big_call, snapshot(small, large, program_model="large")) == ["small"]


def test_a_call_no_engine_could_ever_hold_names_the_largest_engine():
    pipeline = Pipeline(resolve("hetflow").policy)
    small = replace(engine("small-0", "small"), kv_capacity_tokens=120_000)
    with pytest.raises(ResourceExhausted, match="largest engine, small-0 \\(small\\), holds 120000"):
        pipeline.candidate_models(call(input_tokens=200_000), snapshot(small, engine("large-0", "large")))


def test_a_call_only_an_unhealthy_engine_could_hold_is_unavailable_not_never():
    """Refused for good (RESOURCE_EXHAUSTED without a hint, a 400 at the gateway) only when no engine,
    healthy or not, could hold it: one down now is back later."""
    pipeline = Pipeline(resolve("hetflow").policy)
    small = replace(engine("small-0", "small"), kv_capacity_tokens=120_000)
    large = replace(engine("large-0", "large"), kv_capacity_tokens=400_000, healthy=False)
    with pytest.raises(Unavailable, match="only large-0 \\(large\\), unhealthy now"):
        pipeline.candidate_models(call(input_tokens=200_000), snapshot(small, large))


@pytest.mark.parametrize("model_picker", ["chimera-slack", "least-load", "join-shortest-queue", "round-robin"])
def test_the_model_picker_never_picks_a_model_that_could_not_hold_the_call(model_picker: str):
    """A reported engine with no KV room looks idle to a model picker; it is no candidate, so the
    predictor is never asked about its model and the picker must not choose it (fresh-clone run AM2)."""
    policy = resolve("hetflow").policy
    pipeline = Pipeline(replace(policy, model=StageConfig(model_picker)))
    busy = replace(engine("small-0", "small"), kv_capacity_tokens=120_000, in_flight_tokens=5_000.0)
    empty = replace(engine("ghost-0", "ghost"), kv_capacity_tokens=0)
    view = snapshot(busy, empty)
    decision = pipeline.decide(call(), view, pipeline.candidate_models(call(), view), {},
                               {"small": (Prediction(10.0), "")}, router_asked=False)
    assert (decision.model, decision.engine_id) == ("small", "small-0")
    assert not {"ghost", "ghost-0"} & set(decision.stages[0].choice.loads)
