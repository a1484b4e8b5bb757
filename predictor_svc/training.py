"""``hetflow train predictor``: fit Chimera's QRF on traces and report how well it orders requests.

Metric (Chimera appendix B.2): Kendall tau distance between the predicted and the oracle order of
the held-out requests' remaining tokens, (1 - tau_b) / 2 in [0, 1]: the share of inverted pairs;
0 is the oracle, ~0.5 is FCFS. It is computed per (family, model) and averaged. Baselines: FCFS
(order of arrival) and the input length. Also reported: the coverage of the predicted [q10, q90]
interval (target 0.8). The split holds out whole programs, so no program is seen in both halves.
Two layouts are trained, one forest with the model as a feature and one forest per model; the one
with the lower mean distance is kept.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy.stats import kendalltau
from tqdm import tqdm

from hetflow.core.features import FeatureRow
from hetflow.core.tokens import count_tokens
from hetflow.core.trace import StageRecord, programs, remaining_output_tokens
from predictor_svc.qrf import Featurizer, QuantileLengthModel, fit_forest

INTERVAL = (0.1, 0.9)


@dataclass
class Example:
    row: FeatureRow
    remaining_tokens: float
    program_id: str
    arrival_s: float


def examples(records: Sequence[StageRecord], models: Sequence[str]) -> list[Example]:
    out = []
    for program in programs(records).values():
        for r in program:
            for m in models:
                row = FeatureRow(model=m, workflow=r.workflow, agent=r.agent, stage_index=r.stage_index,
                                 stage_count=r.stage_count, system_prompt_tokens=count_tokens(r.system_prompt),
                                 user_prompt_tokens=count_tokens(r.user_prompt), input_tokens=r.input_tokens[m],
                                 user_prompt=r.user_prompt)
                out.append(Example(row, float(remaining_output_tokens(program, r.stage_index, m)), r.program_id,
                                   r.arrival_s + 1e-3 * r.stage_index))
    return out


def split(data: list[Example], holdout: float, seed: int) -> tuple[list[Example], list[Example]]:
    ids = sorted({e.program_id for e in data})
    random.Random(seed).shuffle(ids)
    held = set(ids[: max(1, int(len(ids) * holdout))])
    return [e for e in data if e.program_id not in held], [e for e in data if e.program_id in held]


def kendall_tau_distance(predicted: Sequence[float] | np.ndarray, truth: Sequence[float]) -> float:
    """(1 - tau_b) / 2: 0 when the orders agree, 1 when reversed (Chimera B.2)."""
    tau = kendalltau(predicted, truth).statistic
    return 0.5 if tau is None or np.isnan(tau) else (1.0 - float(tau)) / 2.0


def evaluate(model: QuantileLengthModel, held: list[Example]) -> dict[str, dict[str, float]]:
    """Per "family/model": QRF, FCFS and input-length distances, and interval coverage."""
    predictions = model.predict([e.row for e in held], INTERVAL)
    groups: dict[str, list[int]] = {}
    for i, e in enumerate(held):
        groups.setdefault(f"{e.row.workflow}/{e.row.model}", []).append(i)
    out = {}
    for key, idx in sorted(groups.items()):
        truth = [held[i].remaining_tokens for i in idx]
        lo, hi = predictions[idx, 1], predictions[idx, 2]
        out[key] = {
            "n": float(len(idx)),
            "qrf": kendall_tau_distance(predictions[idx, 0], truth),
            "fcfs": kendall_tau_distance([held[i].arrival_s for i in idx], truth),
            "input_length": kendall_tau_distance([held[i].row.input_tokens for i in idx], truth),
            "coverage": float(np.mean((np.array(truth) >= lo) & (np.array(truth) <= hi))),
        }
    return out


def mean_of(metrics: dict[str, dict[str, float]], key: str) -> float:
    return statistics.mean(v[key] for v in metrics.values())


def fit(train: list[Example], models: Sequence[str], per_model: bool, n_estimators: int, seed: int,
        featurizer: Featurizer) -> QuantileLengthModel:
    forests = {}
    if per_model:
        for m in tqdm(models, desc="forests (one per model)", leave=False):
            rows = [e for e in train if e.row.model == m]
            forests[m] = fit_forest(featurizer.transform([e.row for e in rows], with_model=False),
                                    np.array([e.remaining_tokens for e in rows]), n_estimators, seed)
    else:
        forests[""] = fit_forest(featurizer.transform([e.row for e in train]),
                                 np.array([e.remaining_tokens for e in train]), n_estimators, seed)
    return QuantileLengthModel(featurizer, per_model, forests, tuple(models))


def train(records: Sequence[StageRecord], models: Sequence[str], n_estimators: int = 100, seed: int = 0,
          holdout: float = 0.2) -> tuple[QuantileLengthModel, dict]:
    data = examples(records, models)
    train_set, held = split(data, holdout, seed)
    steps = tqdm(total=4, desc="train predictor")
    featurizer = Featurizer().fit([e.row for e in train_set])
    steps.update()
    candidates = {}
    for per_model in (False, True):
        model = fit(train_set, models, per_model, n_estimators, seed, featurizer)
        steps.update()
        candidates[per_model] = (model, evaluate(model, held))
    best = min(candidates, key=lambda k: mean_of(candidates[k][1], "qrf"))
    steps.update()
    steps.close()
    model, metrics = candidates[best]
    summary = {
        "layout": "per-model forests" if best else "model as a feature",
        "layouts_compared": {("per-model forests" if k else "model as a feature"): mean_of(v[1], "qrf")
                             for k, v in candidates.items()},
        "kendall_tau_distance": {k: mean_of(metrics, k) for k in ("qrf", "fcfs", "input_length")},
        "interval": list(INTERVAL), "coverage": mean_of(metrics, "coverage"),
        "per_group": metrics, "train_examples": len(train_set), "heldout_examples": len(held),
    }
    return model, summary

