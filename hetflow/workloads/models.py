"""The models traces are written for, with the published figures their lengths and accuracy follow.

- Accuracy: the Qwen2.5 technical report's instruct-model scores, HumanEval for "code" and MATH for
  "math". "general" (chat, text-to-SQL, Kairos's applications) has no such benchmark here; it is our
  assumption, set to rise with model size like the others (docs/workloads.md).
- Output length: Chimera 4.1 publishes the (mean, std) of total output tokens per workflow for
  Qwen2.5-1.5B and 14B on APPS ("code") and MATH ("math"); 3B and 7B are interpolated linearly in
  log(parameters) between them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PUBLISHED_TOTAL_OUTPUT = {  # Chimera 4.1: (mean, std) of total output tokens per workflow
    "code": {1.5: (447.0, 1276.0), 14.7: (649.0, 534.0)},
    "math": {1.5: (606.0, 2587.0), 14.7: (709.0, 715.0)},
}


@dataclass(frozen=True)
class TraceModel:
    name: str
    params_b: float
    accuracy: dict[str, float]
    """Mean accuracy per family ("code", "math", "general")."""

    def total_output(self, family: str) -> tuple[float, float]:
        """(mean, std) of total output tokens per workflow: published, or interpolated in log(params)."""
        points = PUBLISHED_TOTAL_OUTPUT[family]
        (p0, (m0, s0)), (p1, (m1, s1)) = sorted(points.items())
        t = (math.log(self.params_b) - math.log(p0)) / (math.log(p1) - math.log(p0))
        t = min(max(t, 0.0), 1.0)
        return m0 + t * (m1 - m0), s0 + t * (s1 - s0)


QWEN = (
    TraceModel("qwen2.5-1.5b-instruct", 1.5, {"code": 0.616, "math": 0.552, "general": 0.45}),
    TraceModel("qwen2.5-3b-instruct", 3.1, {"code": 0.744, "math": 0.659, "general": 0.55}),
    TraceModel("qwen2.5-7b-instruct", 7.6, {"code": 0.848, "math": 0.755, "general": 0.65}),
    TraceModel("qwen2.5-14b-instruct", 14.7, {"code": 0.835, "math": 0.800, "general": 0.72}),
)
MODELS = {m.name: m for m in QWEN}
DEFAULT_MODELS = ("qwen2.5-1.5b-instruct", "qwen2.5-7b-instruct")

STAND_INS = {"llama-2-7b-hf": "qwen2.5-7b-instruct"}
"""Served models the traces are not written for, and the trace model whose token counts and answers
their requests take: the load-balancer paper's Llama-2-7B (section 5) as Qwen2.5-7B, the same size class
(its tokenizer counts somewhat differently; the requests' lengths are Qwen's)."""
