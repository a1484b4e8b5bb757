"""A simulated GPU engine behind vLLM's OpenAI server surface (``hetflow serve vllm-sim``).

The core's engine model (continuous batching, paged KV with prefix caching, preemption, a timing
profile) runs in real time, time-scaled so a small host keeps up, and answers as ``vllm serve`` 0.32
does: the same routes, request fields, errors, SSE chunks and Prometheus metric names. Any client or
router written for vLLM, vLLM's own router included, runs against it unchanged.
"""
