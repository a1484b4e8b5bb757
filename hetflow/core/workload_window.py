"""What a balancer records of its live workload for re-planning (Cascadia 4.4: "subsample 50 requests
every 5 minutes and record the workload characteristics"): the arrival rate over the window and a
uniform sample of its calls (reservoir sampling, Vitter's algorithm R), each with its prompt, its
lengths and, under a cascade, the first model type's grade (the workload's difficulty as the judge
sees it)."""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

PROFILING_WORKFLOW = "hetflow-replan"
"""The workflow of the re-planner's own profiling calls (``hetflow replan``): not part of the workload."""


@dataclass
class SampledCall:
    received_unix_s: float
    prompt: str
    input_tokens: int
    output_tokens: int = 0
    """The first model type's answer (the call's own answer without a cascade); 0 until it ends."""
    first_grade: float | None = None
    """The judge's grade of c_1's answer; None without a cascade or a grade."""


class WorkloadWindow:
    def __init__(self, window_s: float = 300.0, sample_size: int = 50, seed: int = 0) -> None:
        if window_s <= 0 or sample_size < 1:
            raise ValueError("the workload window needs window_s > 0 and sample_size >= 1")
        self.window_s, self.sample_size = window_s, sample_size
        self._rng = random.Random(seed)
        self._arrivals: deque[float] = deque()
        self._window_start_s: float | None = None
        self._first_s: float | None = None
        self._seen = 0
        self._sample: list[SampledCall] = []
        self._previous: list[SampledCall] = []
        """The last complete window's sample: what is reported while the current one is young."""

    def record(self, received_unix_s: float, prompt: str, input_tokens: int, workflow: str = "") -> SampledCall:
        """Count the call; it enters the sample with probability sample_size / calls seen this window.
        Returns its record (filled in when its answer is graded), sampled or not. The re-planner's
        profiling calls are neither counted nor sampled."""
        if workflow == PROFILING_WORKFLOW:
            return SampledCall(received_unix_s, prompt, input_tokens)
        self._roll(received_unix_s)
        self._arrivals.append(received_unix_s)
        call = SampledCall(received_unix_s, prompt, input_tokens)
        self._seen += 1
        if len(self._sample) < self.sample_size:
            self._sample.append(call)
        else:
            slot = self._rng.randrange(self._seen)
            if slot < self.sample_size:
                self._sample[slot] = call
        return call

    def rate_per_s(self, now_unix_s: float) -> float:
        """Calls per second over the last ``window_s`` (over the time since the first call while younger)."""
        self._expire(now_unix_s)
        if not self._arrivals:
            return 0.0
        first_s = now_unix_s if self._first_s is None else self._first_s
        span_s = min(self.window_s, now_unix_s - first_s)
        return len(self._arrivals) / span_s if span_s > 0 else 0.0

    def sample(self, now_unix_s: float) -> list[SampledCall]:
        """The current window's sample joined with the last complete one's, newest first, at most
        ``sample_size`` (a window just begun still reports the one before)."""
        self._roll(now_unix_s)
        recent = sorted(self._sample + self._previous, key=lambda c: -c.received_unix_s)
        return recent[:self.sample_size]

    def _roll(self, now_unix_s: float) -> None:
        if self._window_start_s is None:
            self._window_start_s = self._first_s = now_unix_s
        elif now_unix_s - self._window_start_s >= self.window_s:
            self._previous, self._sample, self._seen = self._sample, [], 0
            self._window_start_s = now_unix_s
        self._expire(now_unix_s)

    def _expire(self, now_unix_s: float) -> None:
        while self._arrivals and self._arrivals[0] < now_unix_s - self.window_s:
            self._arrivals.popleft()
