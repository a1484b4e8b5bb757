"""vLLM's router (``vllm-router`` 0.1.17, vllm-project/router) configured as its documentation tells an
operator, in front of a pool of simulated engines (``hetflow serve vllm-sim``).

Program scheduling (``docs/program_scheduling.md``, "Recommended configuration" and "Offline
calibration models"): ``global_queue: true`` ("the recommended deployment mode"), ``resume_order: mru``,
identity from ``vllm_xargs.agentic_context``, a logical KV-token capacity per data-parallel rank, and two
cost models the docs tell operators to calibrate on the deployed backend:
- cold prefill, ``t = a + b x + c x^2`` seconds with ``x`` the uncached prompt tokens in thousands;
- decode, aggregate throughput ``B / (f + r B + c C)`` tokens/s for ``B`` running requests holding ``C``
  context tokens, i.e. a step of ``f + r B + c C`` seconds.
Here the backend is the engine model, so both are least-squares fits to its profile (what the docs'
calibration tool measures on a GPU), and the capacity is the profile's KV tokens. ``decode_throughput_alpha``
is not calibrated by the tool; it keeps the documented 0.15.

Time scale: the pool runs ``time_scale`` times slower than the GPU, so every time constant of the
router's configuration scales with it (the cost models, the polling interval, the TTLs, the queue and
force-resume timeouts), as every constant of the client's trace does.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from hetflow.core.engine.profile import EngineProfile

DOCUMENTED_DECODE_THROUGHPUT_ALPHA = 0.15
"""``prefill_cost_model.decode_throughput_alpha``: set by hand per the docs; their value."""
DOCUMENTED_TIMES_S = {"metrics_interval_seconds": 1.0, "queue_timeout_seconds": 600.0,
                      "force_resume_timeout_seconds": 300.0, "paused_retention_ttl_seconds": 1800.0,
                      "max_acting_ttl_seconds": 10.0, "shared_prefix_freshness_warmup_seconds": 100.0}
"""The time constants of the documented configuration (its defaults), at GPU speed."""
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


def program_scheduling_config(profile: EngineProfile, time_scale: float = 1.0) -> dict[str, Any]:
    """The documented recommended configuration for a pool of ``profile`` engines, one rank each."""
    scaled = {name: seconds * time_scale for name, seconds in DOCUMENTED_TIMES_S.items()}
    return {"program_scheduling_enable_key": "vllm_xargs.agentic_context", "global_queue": True,
            "resume_order": "mru", "token_capacity_per_dp_rank": profile.kv_capacity_tokens, **scaled,
            **calibrate(profile).config(time_scale)}


def router_binary() -> str:
    """The ``vllm-router`` installed with this interpreter (the ``bench`` extra), else the one on PATH."""
    beside = Path(sys.executable).parent / "vllm-router"
    found = str(beside) if beside.exists() else shutil.which("vllm-router")
    if not found:
        raise FileNotFoundError("vllm-router is not installed: scripts/setup.sh installs it (the bench extra)")
    return found


def router_command(worker_urls: Sequence[str], port: int, prometheus_port: int, policy: str = "consistent_hash",
                   program_config: dict[str, Any] | None = None, binary: str = "",
                   request_timeout_s: float | None = None) -> list[str]:
    """The router's command line: HTTP workers, its own Prometheus port (two routers on a host need
    two), and Program scheduling when ``program_config`` is given (the docs' launch, with
    ``consistent_hash`` for requests without program identity)."""
    command = [binary or router_binary(), "--host", "127.0.0.1", "--port", str(port), "--worker-urls", *worker_urls,
               "--policy", policy, "--prometheus-host", "127.0.0.1", "--prometheus-port", str(prometheus_port)]
    if request_timeout_s is not None:  # the router's own timeout, scaled with the pool like every other
        command += ["--request-timeout-secs", str(max(1, round(request_timeout_s)))]
    if program_config is not None:
        command += ["--enable-program-scheduling", "--program-scheduling-config-json",
                    json.dumps(program_config, separators=(",", ":"))]
    return command


def agentic_context(program_id: str, step_id: int, parent_program_id: str = "", expected_resume: bool = True,
                    blocks_parent: bool = False, **fields: Any) -> dict[str, str]:
    """``vllm_xargs`` naming a call's program for vLLM's router. ``agentic_context`` travels as a JSON
    string: the router takes an object or a string, but vLLM's server checks ``vllm_xargs`` values as
    strings, numbers or lists and refuses an object. ``blocks_parent`` is always said (the router refuses
    a context without a parent that does not say it blocks none); ``fields``: the rest of the schema
    (``task_id``, ``agent_id``, ``root_program_id``, request-scoped ``deadline_seconds``...)."""
    if blocks_parent and not parent_program_id:
        raise ValueError("a program that blocks its parent needs parent_program_id")
    context: dict[str, Any] = {"program_id": program_id, "step_id": step_id, "expected_resume": expected_resume,
                               "blocks_parent": blocks_parent}
    if parent_program_id:
        context["parent_program_id"] = parent_program_id
    context.update(fields)
    return {"agentic_context": json.dumps(context, separators=(",", ":"))}
