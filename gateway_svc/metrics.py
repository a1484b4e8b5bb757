"""The gateway's request metrics, named as vLLM's OpenAI server names them (``vllm/v1/metrics/loggers.py``:
``vllm:time_to_first_token_seconds``, ``vllm:inter_token_latency_seconds``,
``vllm:e2e_request_latency_seconds``, ``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``,
``vllm:request_success_total``), so dashboards built for vLLM read the gateway unchanged. Measured at
the gateway, they include the balancer's decision and any time in hetflow's queues.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Histogram

_LATENCY_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                      10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
_ITL_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                  20.0, 40.0, 80.0)

TIME_TO_FIRST_TOKEN_S = Histogram("vllm:time_to_first_token_seconds", "Time to first token, at the gateway",
                                  ["model_name"], buckets=_LATENCY_BUCKETS_S)
INTER_TOKEN_LATENCY_S = Histogram("vllm:inter_token_latency_seconds", "Inter-token latency, at the gateway",
                                  ["model_name"], buckets=_ITL_BUCKETS_S)
E2E_REQUEST_LATENCY_S = Histogram("vllm:e2e_request_latency_seconds", "End-to-end request latency, at the gateway",
                                  ["model_name"], buckets=_LATENCY_BUCKETS_S)
PROMPT_TOKENS = Counter("vllm:prompt_tokens", "Prompt tokens of finished requests", ["model_name"])
GENERATION_TOKENS = Counter("vllm:generation_tokens", "Generated tokens", ["model_name"])
REQUEST_SUCCESS = Counter("vllm:request_success", "Finished requests by finish reason",
                          ["model_name", "finished_reason"])
GATEWAY_OVERHEAD_S = Histogram(
    "hetflow_gateway_overhead_seconds", "Time a request spends in the gateway itself: parsing, converting and "
    "writing, without the time awaiting the balancer", buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                                0.025, 0.05, 0.1, 0.25))
REQUEST_FAILURE = Counter("hetflow_gateway_request_failure", "Requests answered with an error, by HTTP status",
                          ["status"])


class RequestTimer:
    """Times one request's tokens as they stream: TTFT, inter-token gaps, end to end."""

    def __init__(self, started_s: float) -> None:
        self.started_s = started_s
        self._last_s: float | None = None
        self._tokens = 0
        self._inter_token_s: Any = None
        """The model's inter-token histogram, looked up once per request rather than once per chunk."""

    def tokens(self, model: str, now_s: float, output_tokens: int) -> None:
        """A chunk arrived carrying the call's first ``output_tokens`` tokens in total."""
        new = output_tokens - self._tokens
        if new <= 0:
            return
        if self._last_s is None:
            TIME_TO_FIRST_TOKEN_S.labels(model).observe(now_s - self.started_s)
            new -= 1
        elif new:
            gap_s = (now_s - self._last_s) / new
            if self._inter_token_s is None:
                self._inter_token_s = INTER_TOKEN_LATENCY_S.labels(model)
            for _ in range(new):
                self._inter_token_s.observe(gap_s)
        self._last_s, self._tokens = now_s, output_tokens

    def finished(self, model: str, now_s: float, reason: str, prompt_tokens: int, output_tokens: int) -> None:
        E2E_REQUEST_LATENCY_S.labels(model).observe(now_s - self.started_s)
        PROMPT_TOKENS.labels(model).inc(prompt_tokens)
        GENERATION_TOKENS.labels(model).inc(output_tokens)
        REQUEST_SUCCESS.labels(model, reason).inc()
