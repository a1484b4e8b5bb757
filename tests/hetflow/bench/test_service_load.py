"""The service load test configures the service for the models its artifact was trained for."""

import json

from hetflow.bench.service_load import served_models
from hetflow.workloads.models import DEFAULT_MODELS


def test_the_artifacts_own_models_are_served_and_the_defaults_where_it_names_none(tmp_path):
    (tmp_path / "meta.json").write_text(json.dumps({"kind": "router", "models": ["qwen2.5-7b-instruct"]}))
    assert served_models(tmp_path) == ["qwen2.5-7b-instruct"]
    assert served_models(tmp_path / "missing") == list(DEFAULT_MODELS)
