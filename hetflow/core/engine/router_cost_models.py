"""vLLM's router's two cost models (vllm-project/router ``src/program_scheduling/policy.rs`` @ 1aa3500,
``PrefillCostModel`` and ``DecodeThroughputModel``; ``docs/program_scheduling.md``, "Offline calibration
models"), fitted to an engine profile as the docs' calibration tool fits them to a GPU:
- cold prefill, ``t = a + b x + c x^2`` seconds with ``x`` the uncached prompt tokens in thousands;
- decode, aggregate throughput ``B / (f + r B + c C)`` tokens/s for ``B`` running requests holding ``C``
  context tokens, i.e. a step of ``f + r B + c C`` seconds.
The live harness writes them into the router's configuration (``hetflow.bench.vllm_router``) and the
simulator's ``vllm-router-program`` preset reads the same fit, so both doors price a cache miss alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from hetflow.core.engine.profile import EngineProfile

DOCUMENTED_DECODE_THROUGHPUT_ALPHA = 0.15
"""``prefill_cost_model.decode_throughput_alpha``: set by hand per the docs; their value."""
PREFILL_FIT_TOKENS = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
DECODE_FIT_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DECODE_FIT_CONTEXTS = (512, 1024, 2048, 4096, 8192, 16384)


@dataclass(frozen=True)
class Calibration:
    """The router's two cost models fitted to an engine profile, at GPU speed, with their fit errors."""

    prefill_intercept_s: float
    prefill_s_per_1k_tokens: float
    prefill_s_per_1k_tokens_squared: float
    decode_fixed_step_s: float
    decode_step_s_per_request: float
    decode_step_s_per_context_token: float
    prefill_max_error: float
    """Largest relative error of the prefill fit at the fitted points."""
    decode_max_error: float

    def cache_miss_impact_s(self, uncached_tokens: int) -> float:
        """Cold prefill of ``uncached_tokens`` with the decode it slows, ``(a + b x + c x^2) (2 - alpha)``
        (policy.rs ``cache_miss_impact_seconds``), at GPU speed."""
        if uncached_tokens <= 0:
            return 0.0
        x = uncached_tokens / 1e3
        prefill_s = (self.prefill_intercept_s + self.prefill_s_per_1k_tokens * x
                     + self.prefill_s_per_1k_tokens_squared * x * x)
        return prefill_s * (2.0 - DOCUMENTED_DECODE_THROUGHPUT_ALPHA)

    def decode_tokens_per_s(self, batch: int, context_tokens: int) -> float:
        """Aggregate decode throughput of ``batch`` running requests holding ``context_tokens``,
        ``B / (f + r B + c C)`` tokens/s (policy.rs ``decode_throughput``), at GPU speed."""
        return batch / (self.decode_fixed_step_s + self.decode_step_s_per_request * batch
                        + self.decode_step_s_per_context_token * context_tokens)

    def config(self, time_scale: float = 1.0) -> dict[str, Any]:
        """The router's ``prefill_cost_model`` and ``decode_throughput_model``, scaled to the pool's time."""
        return {"prefill_cost_model": {
                    "intercept_seconds": self.prefill_intercept_s * time_scale,
                    "linear_seconds_per_1k_tokens": self.prefill_s_per_1k_tokens * time_scale,
                    "quadratic_seconds_per_1k_tokens_squared": self.prefill_s_per_1k_tokens_squared * time_scale,
                    "decode_throughput_alpha": DOCUMENTED_DECODE_THROUGHPUT_ALPHA},
                "decode_throughput_model": {
                    "fixed_step_seconds": self.decode_fixed_step_s * time_scale,
                    "batch_step_seconds_per_request": self.decode_step_s_per_request * time_scale,
                    "context_step_seconds_per_token": self.decode_step_s_per_context_token * time_scale}}


def _nonnegative_fit(features: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Least squares on relative error (short prompts and small batches count as much as long ones),
    with the router's constraint that every coefficient is >= 0: a negative one is dropped and the rest
    refitted."""
    features, targets = features / targets[:, None], np.ones_like(targets)
    keep = np.ones(features.shape[1], dtype=bool)
    while True:
        coef = np.zeros(features.shape[1])
        coef[keep] = np.linalg.lstsq(features[:, keep], targets, rcond=None)[0]
        if (coef >= 0).all():
            return coef
        keep &= coef > 0


def calibrate(profile: EngineProfile) -> Calibration:
    """Fit the router's cost models to ``profile`` on prompts and batches the engine can hold."""
    tokens = np.array([t for t in PREFILL_FIT_TOKENS if t < profile.max_model_len], dtype=float)
    # a cold prompt alone: its chunks of the iteration's token budget, each attending to those before it
    prefill_s = np.array([profile.isolated_request_s(int(t), 1) for t in tokens])
    x = tokens / 1e3
    a, b, c = _nonnegative_fit(np.stack([np.ones_like(x), x, x * x], axis=1), prefill_s)
    points = [(batch, batch * context) for batch in DECODE_FIT_BATCHES for context in DECODE_FIT_CONTEXTS
              if batch <= profile.max_num_seqs and batch * context <= profile.kv_capacity_tokens]
    batch, context = (np.array(v, dtype=float) for v in zip(*points))
    step_s = np.array([profile.step_ms(0, int(b_), int(c_)) / 1e3 for b_, c_ in points])
    f, r, per_token = _nonnegative_fit(np.stack([np.ones_like(batch), batch, context], axis=1), step_s)
    prefill_error = np.abs((a + b * x + c * x * x) / prefill_s - 1).max()
    decode_error = np.abs((f + r * batch + per_token * context) / step_s - 1).max()
    return Calibration(float(a), float(b), float(c), float(f), float(r), float(per_token),
                       float(prefill_error), float(decode_error))
