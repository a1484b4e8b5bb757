"""The roofline's efficiencies, fitted to the H100's measured operator tables and checked on the H200's
(issue 32; docs/profiles.md).

The roofline (``hetflow.core.engine.profile.derive``) prices an iteration from datasheet figures:
weight reads at the bandwidth the H100's read-only copy measured (0.92 of the datasheet's), a latency
floor per layer (each layer's kernels take a few microseconds each however small the batch), KV reads
as a share of HBM bandwidth, and a prefill token and a decoding sequence as shares of dense BF16
throughput (2 FLOPs per parameter). Each term is linear in its inverse efficiency (the floor in its
ms per layer), so the four are fitted by non-negative least squares on relative error over the
composed iteration times (``operator_tables``) of every measured model on the H100, the grid the
measurement fitted its own coefficients on (prefill 0-8,192 tokens, 0-256 decoding sequences at
256-4,096 context), with the engine's overhead left out on both sides. The H200 is the validation:
the same constants, its own datasheet.

    python -m hetflow.bench.roofline_check
"""

from __future__ import annotations

import argparse
import itertools
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

from hetflow.core.engine.operator_tables import measured_file, measured_models
from hetflow.core.engine.profile import (
    COMPUTE_EFFICIENCY,
    DECODE_SEQ_EFFICIENCY,
    HBM_EFFICIENCY,
    KV_READ_EFFICIENCY,
    LAYER_LATENCY_MS,
    catalog_architecture,
    catalog_gpu,
    load_profile,
)

FIT_GPU, CHECK_GPU = "h100-80g", "h200"
GRID_PREFILL, GRID_BATCH, GRID_CONTEXT = (0, 128, 512, 2048, 8192), (0, 1, 8, 32, 64, 128, 256), (256, 1024, 4096)
CONSTANTS = ("weights (HBM efficiency)", "per-layer latency floor (ms)", "prefill compute efficiency",
             "decode compute per sequence", "KV reads (HBM efficiency)")
BEFORE = (0.7, 0.0, 0.5, 0.5, 0.7)
"""The roofline before the recalibration: datasheet rules of thumb, no latency floor."""


@dataclass(frozen=True)
class Point:
    gpu: str
    model: str
    prefill_tokens: int
    batch: int
    context: int
    measured_ms: float
    terms: tuple[float, float, float, float, float]
    """Each roofline term at efficiency 1 (ms): weights / bandwidth, layers (x the floor), prefill FLOPs,
    decode FLOPs, KV / bandwidth."""

    def roofline_ms(self, constants: tuple[float, ...]) -> float:
        weights, floor, prefill, decode, kv = constants
        t = self.terms
        return t[0] / weights + t[1] * floor + t[2] / prefill + t[3] / decode + t[4] / kv


def point(gpu: str, model: str, prefill_tokens: int, batch: int, context: int) -> Point:
    arch, spec = catalog_architecture(model), catalog_gpu(gpu)
    tables = load_profile(f"{model}@{gpu}").operator_tables
    assert tables is not None
    measured = tables.step_ms([(prefill_tokens, 0)] if prefill_tokens else [], batch, batch * context)
    bytes_per_ms, flops_per_ms = spec.hbm_gb_s * 1e9 / 1e3, spec.bf16_tflops * 1e12 / 1e3
    return Point(gpu, model, prefill_tokens, batch, context, measured, (
        arch.weight_bytes / bytes_per_ms, arch.layers, prefill_tokens * 2 * arch.params / flops_per_ms,
        batch * 2 * arch.params / flops_per_ms, batch * context * arch.kv_bytes_per_token / bytes_per_ms))


def grid(gpu: str) -> list[Point]:
    return [point(gpu, model, p, b, c) for model in measured_models(gpu)
            for p, b in itertools.product(GRID_PREFILL, GRID_BATCH) if p or b for c in (GRID_CONTEXT if b else (0,))]


def named_points(gpu: str) -> list[Point]:
    return [point(gpu, model, n["P"], n["B"], n["C"] or 0) for model in measured_models(gpu)
            for n in measured_file(gpu)["models"][model]["named_points"]]  # type: ignore[index]


def weight_read_efficiency() -> float:
    """The H100's measured read-only copy bandwidth as a share of its datasheet's."""
    read_gb_s = measured_file(FIT_GPU)["provenance"]["machine"]["read"]["gb_s"]  # type: ignore[index]
    return float(read_gb_s / catalog_gpu(FIT_GPU).hbm_gb_s)


def fit(points: list[Point]) -> tuple[float, ...]:
    """The constants minimising the squared relative error, weights at the measured read bandwidth and
    the other four non-negative (as inverse efficiencies, the floor as itself)."""
    weights = weight_read_efficiency()
    terms = np.array([p.terms for p in points])
    measured = np.array([p.measured_ms for p in points])
    rest = measured - terms[:, 0] / weights
    solved, _ = nnls(terms[:, 1:] / measured[:, None], rest / measured)
    floor, *inverse = (float(v) for v in solved)
    return (weights, floor, *(1 / v if v > 0 else float("inf") for v in inverse))


def in_derive() -> tuple[float, ...]:
    return (HBM_EFFICIENCY, LAYER_LATENCY_MS, COMPUTE_EFFICIENCY, DECODE_SEQ_EFFICIENCY, KV_READ_EFFICIENCY)


def relative_errors(points: list[Point], constants: tuple[float, ...]) -> np.ndarray:
    return np.array([p.roofline_ms(constants) / p.measured_ms - 1 for p in points])


def report() -> str:
    before, now, fitted = BEFORE, in_derive(), fit(grid(FIT_GPU))
    lines = ["constant                        fitted on H100   in derive()   before",
             *(f"{name:<32}{f:>14.3f}{n:>14.3f}{b:>9.2f}" for name, f, n, b in zip(CONSTANTS, fitted, now, before)),
             "", "relative error of the roofline (no engine overhead) against the composed measurement"]
    for gpu in (FIT_GPU, CHECK_GPU):
        points = grid(gpu)
        for label, eff in (("before", before), ("recalibrated", now)):
            err = np.abs(relative_errors(points, eff))
            lines.append(f"{gpu:<9} {label:<13} grid of {len(points)}: "
                         f"median {np.median(err):6.1%}  max {err.max():6.1%}")
    lines += ["", "named points: model (prefill, batch, context): measured ms, roofline before / recalibrated"]
    for gpu in (FIT_GPU, CHECK_GPU):
        for p in named_points(gpu):
            lines.append(f"{gpu:<9} {p.model:<23} ({p.prefill_tokens:>4}, {p.batch:>3}, {p.context:>4}): "
                         f"{p.measured_ms:8.2f}  {p.roofline_ms(before) / p.measured_ms - 1:+6.0%} / "
                         f"{p.roofline_ms(now) / p.measured_ms - 1:+6.0%}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(prog="python -m hetflow.bench.roofline_check", description=__doc__.splitlines()[0]
                            ).parse_args(argv)
    print(report())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
