"""Model stage of a deployment with one pool per model: the client names the model, the router routes
within that model's pool.

This is how vLLM's router, SGLang's router, llm-d (one InferencePool per model) and Dynamo serve several
models: each request's ``model`` field selects the workers that serve it, and the load balancing policy
runs among those only. Which model a client names is the application's choice, so the workload states
it: a program's calls all name one model (a session of an agent application is configured with one),
drawn for the program by ``mix``:

- ``throughput`` (the default): each model's share of programs is its share of the pool's full-batch
  decode rate, sum over its healthy engines of ``max_batch_size / decode_ms_per_token``; an operator who
  sizes each model's pool to the demand it serves deploys this;
- a mapping ``{model: weight}``: the shares as stated (``{large: 1}``: every program names the large
  model).

The draw hashes the program id, so a program's model does not depend on the order calls arrive in, and a
run repeats. It reads no router confidence.
"""

from __future__ import annotations

import hashlib
from typing import Mapping

from hetflow.core.call import LlmCall
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import Choice, ModelPicker, PolicyStore, Prediction
from hetflow.core.snapshot import ClusterSnapshot


def model_shares(snapshot: ClusterSnapshot, mix: str | Mapping[str, float]) -> dict[str, float]:
    """Each healthy model's share of programs (summing to 1) under ``mix``; a model the mapping leaves out
    gets none, and when it weights no healthy model every one gets an equal share (any may serve)."""
    healthy = snapshot.healthy_models()
    if mix == "throughput":
        weights = {m: sum(e.max_batch_size / e.decode_ms_per_token for e in snapshot.healthy_engines(m)
                          if e.decode_ms_per_token > 0)  # an engine that told no profile: its speed unknown
                   for m in healthy}
    else:
        assert not isinstance(mix, str)
        weights = {m: float(mix.get(m, 0.0)) for m in healthy}
    total = sum(weights.values())
    if total <= 0:
        return {m: 1.0 / len(healthy) for m in healthy}
    return {m: w / total for m, w in weights.items()}


def unit_draw(program_id: str) -> float:
    """The program's point in [0, 1): the same for every call of the program, on every run."""
    return int.from_bytes(hashlib.blake2b(program_id.encode(), digest_size=8).digest(), "big") / 2.0 ** 64


def drawn_model(shares: Mapping[str, float], point: float) -> str:
    """The model whose interval of the cumulative shares (models by name) holds ``point``."""
    cumulative = 0.0
    models = sorted(m for m, share in shares.items() if share > 0)
    for model in models:
        cumulative += shares[model]
        if point < cumulative:
            return model
    return models[-1]


@plugin("model-picker", "named-pool")
class NamedPool(ModelPicker):
    program_affinity = True

    def __init__(self, mix: str | Mapping[str, float] = "throughput") -> None:
        if isinstance(mix, str) and mix != "throughput":
            raise ValueError(f"named-pool's mix is 'throughput' or a mapping of model to weight, got {mix!r}")
        if not isinstance(mix, str) and (not mix or min(mix.values()) < 0 or sum(mix.values()) <= 0):
            raise ValueError("named-pool's mix needs weights >= 0 with a positive sum")
        self.mix = mix if isinstance(mix, str) else dict(mix)

    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, confidence: Mapping[str, float],
             predictions: Mapping[str, Prediction], store: PolicyStore) -> Choice:
        shares = model_shares(snapshot, self.mix)
        model = drawn_model(shares, unit_draw(call.workflow.program_id))
        return Choice(model, "named-pool:" + ("throughput-mix" if self.mix == "throughput" else "stated-mix"),
                      loads=shares)
