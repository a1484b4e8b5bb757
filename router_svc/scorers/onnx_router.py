"""The learned router (Chimera 3.3) served with onnxruntime: an artifact from ``hetflow train router``.

Prompts are tokenised with the artifact's own tokenizer and cut at its ``max_length``, exactly as in
training; the answer says which prompts were cut.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from hetflow.core.confidence import abilities_from_rates, check_reading, one_difficulty
from router_svc import artifact as artifacts
from router_svc.encoding import PromptEncoder


class OnnxRouterScorer:
    def __init__(self, artifact: str, models: Sequence[str], precision: str = "int8", threads: int = 1,
                 micro_batch: int = 4, reading: str = "one-difficulty") -> None:
        """``artifact``: the directory ``hetflow train router`` wrote, scoring exactly ``models``;
        ``precision``: int8 or fp32 export; ``threads``: onnxruntime threads; ``micro_batch``: prompts per
        onnxruntime run, after sorting a batch by length; ``reading``: ``one-difficulty`` (hetflow's default:
        read through one difficulty per prompt, the models' abilities from the artifact's training label
        rates, ``hetflow.core.confidence``; confirmed on code's held-out seeds, docs/results.md) or
        ``per-model`` (each sigmoid as it is, Chimera 3.3)."""
        import onnxruntime as ort

        if not artifact:
            raise ValueError("router.kind 'minilm-onnx' needs router.artifact (train one with `hetflow train router`)")
        path, expected_models = artifact, list(models)

        if precision not in ("int8", "fp32"):
            raise ValueError(f"router.precision must be int8 or fp32, got {precision!r}")
        check_reading(reading)
        self.micro_batch = max(1, micro_batch)
        root = Path(path)
        meta = artifacts.read(root, expected_models)
        self.models = tuple(meta["models"])
        self.encoder = PromptEncoder(root / "tokenizer.json", int(meta["max_length"]))
        self.abilities = abilities_from_rates(artifacts.solve_rates(meta)) if reading == "one-difficulty" else None
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        model_file = root / ("model.int8.onnx" if precision == "int8" else "model.onnx")
        try:
            self.session = ort.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own types
            raise artifacts.ArtifactError(f"{model_file}: onnxruntime cannot load it: {exc}") from exc

    def score_batch(self, prompts: list[str]) -> list[tuple[dict[str, float], bool]]:
        """Prompts sorted by length run in micro-batches: a batch pads to its longest prompt, and on a
        CPU the padding costs more than batching saves (measured: docs/benchmarks.md)."""
        lengths = [len(e.ids) for e in self.encoder.tokenizer.encode_batch(prompts)]
        order = sorted(range(len(prompts)), key=lambda i: lengths[i])
        out: list[tuple[dict[str, float], bool]] = [({}, False)] * len(prompts)
        for start in range(0, len(order), self.micro_batch):
            idx = order[start:start + self.micro_batch]
            batch = self.encoder.encode([prompts[i] for i in idx])
            confidence = self.session.run(None, {"input_ids": batch.input_ids,
                                                 "attention_mask": batch.attention_mask})[0]
            for i, row, cut in zip(idx, confidence, batch.truncated):
                scores = {m: float(c) for m, c in zip(self.models, row)}
                out[i] = (one_difficulty(scores, self.abilities) if self.abilities else scores, cut)
        return out
