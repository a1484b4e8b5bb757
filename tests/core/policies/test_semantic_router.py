"""vLLM's Semantic Router: the category's highest-scored model, else the default, never the load."""

from hetflow.core import plugins
from hetflow.core.policies.contracts import PolicyStore
from tests.factories import call, engine, snapshot

DOCS_SCORES = {  # the documented example (config/config.yaml, August 2025)
    "math": {"phi4": 1.0, "mistral-small3.1": 0.8, "gemma3:27b": 0.6},
    "computer science": {"gemma3:27b": 0.6, "mistral-small3.1": 0.6, "phi4": 0.0}}
POOL = (engine("a", "phi4"), engine("b", "mistral-small3.1", in_flight_requests=500), engine("c", "gemma3:27b"))


def pick(workflow, *engines, confidence=None, **params):
    picker = plugins.build("model-picker", "semantic-router", {"model_scores": DOCS_SCORES, **params})
    return picker.pick(call(workflow=workflow), snapshot(*engines), confidence or {}, {}, PolicyStore())


def test_the_category_takes_its_highest_scored_model_and_the_first_listed_on_a_tie():
    assert pick("math", *POOL).chosen == "phi4"
    assert pick("code", *POOL).chosen == "gemma3:27b"     # 0.6 = 0.6: the first listed
    assert pick("code", *POOL).rule == "semantic-router:computer science:highest-score"


def test_load_never_moves_the_choice():
    busy = (engine("a", "phi4", in_flight_requests=10_000), *POOL[1:])
    assert pick("math", *busy).chosen == "phi4"


def test_a_scored_model_that_is_down_gives_way_to_the_next_score():
    down = (engine("a", "phi4", healthy=False), *POOL[1:])
    assert pick("math", *down).chosen == "mistral-small3.1"


def test_a_category_without_scores_goes_to_the_default_model_or_else_the_best_average():
    assert pick("chat", *POOL, default_model="mistral-small3.1").chosen == "mistral-small3.1"
    best = pick("chat", *POOL, confidence={"phi4": 0.5, "mistral-small3.1": 0.7, "gemma3:27b": 0.6})
    assert best.chosen == "mistral-small3.1" and best.rule == "semantic-router:other:best-average"
