"""The simulated server's ``/metrics``, under vLLM 0.32's Prometheus names and labels.

As ``vllm/v1/metrics/loggers.py`` (``PrometheusStatLogger``) exports them for one engine: labels
``model_name`` and ``engine="0"``; counters registered without ``_total`` (the exposition adds it);
``vllm:cache_config_info`` a gauge of 1 whose labels are the cache settings, with ``engine`` and no
``model_name``; histogram buckets from ``vllm/v1/metrics/buckets.py``. What the engine model holds
(running, waiting, KV usage, prefix-cache counters, preemptions) is read at scrape time; what happens
to requests is counted as it happens.

One metric is hetflow's, not vLLM's: ``hetflow_sim:step_late_share``, each iteration's lateness against
its intended end as a share of its length, so a run on a host that could not keep up is seen.
"""

from __future__ import annotations

from typing import Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from engine_svc.backends.sim import StepLag
from hetflow.core.engine.scheduler import BatchScheduler, StepPlan

ENGINE = "0"
LABELS = ("model_name", "engine")
TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                  20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                 40.0, 80.0)
REQUEST_LATENCY_BUCKETS_S = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                             120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
LATE_SHARE_BUCKETS = (0.001, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
"""0.05 is a bucket edge: the share of iterations more than 5% late is read off it exactly."""
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")


def request_token_buckets(max_model_len: int) -> tuple[int, ...]:
    """vLLM's 1-2-5 series up to the context length (``build_1_2_5_buckets``)."""
    out: list[int] = []
    scale = 1
    while True:
        for mantissa in (1, 2, 5):
            if mantissa * scale > max_model_len:
                return tuple(out)
            out.append(mantissa * scale)
        scale *= 10


class _EngineState(Collector):
    """What the engine model holds, read at scrape time."""

    def __init__(self, scheduler: BatchScheduler, model_name: str) -> None:
        self._scheduler, self._labels = scheduler, [model_name, ENGINE]

    def collect(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        scheduler = self._scheduler
        for name, doc, value in (
                ("vllm:num_requests_running", "Number of requests in model execution batches.",
                 len(scheduler.running)),
                ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", scheduler.num_waiting),
                ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", scheduler.kv.usage)):
            gauge = GaugeMetricFamily(name, doc, labels=LABELS)
            gauge.add_metric(self._labels, value)
            yield gauge
        for name, doc, total in (
                ("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
                 scheduler.prefix_query_tokens),
                ("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
                 scheduler.prefix_hit_tokens),
                ("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local cache hits).",
                 scheduler.prefix_hit_tokens),
                ("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
                 scheduler.preemptions_total)):
            counter = CounterMetricFamily(name, doc, labels=LABELS)
            counter.add_metric(self._labels, total)
            yield counter
        profile = scheduler.profile
        info = GaugeMetricFamily("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                                 labels=("block_size", "num_gpu_blocks", "enable_prefix_caching", "cache_dtype",
                                         "kv_cache_size_tokens", "engine"))
        info.add_metric([str(profile.block_size), str(profile.num_kv_blocks), str(scheduler.kv.prefix_caching),
                         "auto", str(profile.kv_capacity_tokens), ENGINE], 1.0)
        yield info


class VllmSimMetrics:
    """One server's registry: ``observe_*`` as requests and iterations happen, ``registry`` to expose."""

    def __init__(self, model_name: str, max_model_len: int) -> None:
        self.model_name = model_name
        self.registry = CollectorRegistry()
        r, labels = self.registry, [model_name, ENGINE]
        token_buckets = request_token_buckets(max_model_len)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", LABELS,
                                     registry=r).labels(*labels)
        self.generation_tokens = Counter("vllm:generation_tokens", "Number of generation tokens processed.",
                                         LABELS, registry=r).labels(*labels)
        success = Counter("vllm:request_success", "Count of successfully processed requests.",
                          (*LABELS, "finished_reason"), registry=r)
        self.success = {reason: success.labels(*labels, reason) for reason in FINISH_REASONS}
        self.ttft_s = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                                LABELS, buckets=TTFT_BUCKETS_S, registry=r).labels(*labels)
        self.itl_s = Histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                               LABELS, buckets=ITL_BUCKETS_S, registry=r).labels(*labels)
        self.e2e_s = Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                               LABELS, buckets=REQUEST_LATENCY_BUCKETS_S, registry=r).labels(*labels)
        self.queue_s = Histogram("vllm:request_queue_time_seconds",
                                 "Histogram of time spent in WAITING phase for request.", LABELS,
                                 buckets=REQUEST_LATENCY_BUCKETS_S, registry=r).labels(*labels)
        self.request_prompt_tokens = Histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.",
                                               LABELS, buckets=token_buckets, registry=r).labels(*labels)
        self.request_generation_tokens = Histogram("vllm:request_generation_tokens",
                                                   "Number of generation tokens processed.", LABELS,
                                                   buckets=token_buckets, registry=r).labels(*labels)
        self.iteration_tokens = Histogram("vllm:iteration_tokens_total",
                                          "Histogram of number of tokens per engine_step.", LABELS,
                                          buckets=ITERATION_TOKEN_BUCKETS, registry=r).labels(*labels)
        self.step_late_share = Histogram("hetflow_sim:step_late_share",
                                         "hetflow: each engine iteration's lateness as a share of its length.",
                                         LABELS, buckets=LATE_SHARE_BUCKETS, registry=r).labels(*labels)

    def watch(self, scheduler: BatchScheduler) -> None:
        """Expose what ``scheduler`` holds at every scrape."""
        self.registry.register(_EngineState(scheduler, self.model_name))

    def observe_step(self, plan: StepPlan, lag: StepLag) -> None:
        self.iteration_tokens.observe(plan.prefill_tokens + plan.decode_seqs)
        self.step_late_share.observe(lag.late_share)

    def observe_tokens(self, new_tokens: int, since_last_s: float, first: bool, prompt_tokens: int) -> None:
        """A delta of ``new_tokens`` reached the client ``since_last_s`` after the previous one (after the
        request's arrival for the ``first``)."""
        self.generation_tokens.inc(new_tokens)
        if first:
            self.prompt_tokens.inc(prompt_tokens)
            self.ttft_s.observe(since_last_s)
            gaps = [0.0] * (new_tokens - 1)  # tokens that came with the first
        else:
            gaps = [since_last_s / new_tokens] * new_tokens  # coalesced tokens share the gap
        for gap_s in gaps:
            self.itl_s.observe(gap_s)

    def observe_finished(self, prompt_tokens: int, output_tokens: int, finish_reason: str, queued_s: float,
                         e2e_s: float) -> None:
        self.success.get(finish_reason, self.success["error"]).inc()
        self.request_prompt_tokens.observe(prompt_tokens)
        self.request_generation_tokens.observe(output_tokens)
        self.queue_s.observe(queued_s)
        self.e2e_s.observe(e2e_s)
