"""vLLM's router (``vllm-router`` 0.1.17, vllm-project/router) configured as its documentation tells an
operator, in front of a pool of simulated engines (``hetflow serve vllm-sim``).

Program scheduling (``docs/program_scheduling.md``, "Recommended configuration" and "Offline
calibration models"): ``global_queue: true`` ("the recommended deployment mode"), ``resume_order: mru``,
identity from ``vllm_xargs.agentic_context``, a logical KV-token capacity per data-parallel rank, and the
two cost models the docs tell operators to calibrate on the deployed backend. Here the backend is the
engine model, so both are fits to its profile (``hetflow.core.engine.router_cost_models``), and the
capacity is the profile's KV tokens.

Time scale: the pool runs ``time_scale`` times slower than the GPU, so every time constant of the
router's configuration scales with it (the cost models, the polling interval, the TTLs, the queue and
force-resume timeouts), as every constant of the client's trace does.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any, Sequence

from hetflow.core.engine.profile import EngineProfile
from hetflow.core.engine.router_cost_models import calibrate

DOCUMENTED_TIMES_S = {"metrics_interval_seconds": 1.0, "queue_timeout_seconds": 600.0,
                      "force_resume_timeout_seconds": 300.0, "paused_retention_ttl_seconds": 1800.0,
                      "max_acting_ttl_seconds": 10.0, "shared_prefix_freshness_warmup_seconds": 100.0}
"""The time constants of the documented configuration (its defaults), at GPU speed."""


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
