"""Kairos's latency distributions (4.3) and agent-level priority (5.1).

- Single-request latency per agent: samples kept until the distribution converges, judged each time
  the sample count doubles by the Wasserstein distance to the distribution at the previous doubling.
  Its mode is the expected execution time the memory packer plans with (Kairos 6, eq. 2).
- Remaining latency per agent: for every call, the time from its start to the end of its workflow
  run. Pooling the samples of every run merges the paths below an agent by how often they occur.
- Agent priority: the Wasserstein distances among the agents' remaining-latency distributions and a
  zero-latency anchor, embedded in one dimension by classical MDS; an agent's priority is its
  distance to the anchor there, smaller first.
"""

from __future__ import annotations

from collections import OrderedDict, defaultdict, deque
from typing import Iterable, Mapping, Sequence

import numpy as np

from hetflow.core.monitor.recent import MAX_AGENTS, recent_entry
from hetflow.core.monitor.spans import CallSpan

ANCHOR = "<zero-latency>"
MAX_ANCHOR_AGENTS = 64
"""Agents placed on the anchor line per refresh, those with the most remaining-latency samples: the
placement costs O(n^2) Wasserstein distances and an n x n eigendecomposition on the monitor's loop, and a
framework that names an agent per thread (Codex's ``thread-id``) would make thousands. An agent left
out has no distance (``agent-priority`` gives it the median's)."""


def wasserstein_distance(u: Sequence[float], v: Sequence[float]) -> float:
    """The first Wasserstein distance between two empirical distributions on the line: the area between
    their CDFs (what ``scipy.stats.wasserstein_distance`` computes, without importing scipy.stats)."""
    u_sorted, v_sorted = np.sort(np.asarray(u, dtype=float)), np.sort(np.asarray(v, dtype=float))
    values = np.sort(np.concatenate([u_sorted, v_sorted]))
    widths = np.diff(values)
    u_cdf = np.searchsorted(u_sorted, values[:-1], side="right") / len(u_sorted)
    v_cdf = np.searchsorted(v_sorted, values[:-1], side="right") / len(v_sorted)
    return float(np.sum(np.abs(u_cdf - v_cdf) * widths))


class LatencySamples:
    """One agent's single-request latency samples with the doubling convergence test (Kairos 4.3.1)."""

    def __init__(self, first_check: int = 16, relative_threshold: float = 0.05, max_samples: int = 4096) -> None:
        self.first_check, self.relative_threshold, self.max_samples = first_check, relative_threshold, max_samples
        self.samples: list[float] = []
        self._seen = 0
        self._previous: list[float] = []
        self._next_check = first_check
        self.converged = False
        self.last_distance_s: float | None = None

    def add(self, latency_s: float) -> None:
        self._seen += 1
        if len(self.samples) >= self.max_samples:
            self.samples[(self._seen - 1) % self.max_samples] = latency_s  # the newest replace the oldest
            return
        self.samples.append(latency_s)
        if len(self.samples) == self._next_check:
            if self._previous:
                self.last_distance_s = wasserstein_distance(self.samples, self._previous)
                scale = max(float(np.mean(self._previous)), 1e-9)
                self.converged = self.last_distance_s / scale < self.relative_threshold
            self._previous = list(self.samples)
            self._next_check *= 2

    def mode_s(self) -> float:
        """The latency of highest density (Kairos 6, eq. 2): the centre of the fullest histogram bin."""
        if not self.samples:
            raise ValueError("no samples")
        counts, edges = np.histogram(self.samples, bins="fd" if len(self.samples) > 3 else 1)
        i = int(np.argmax(counts))
        return float((edges[i] + edges[i + 1]) / 2)


def remaining_latency_samples(spans: Iterable[CallSpan]) -> dict[str, list[float]]:
    """Agent -> remaining latencies: each call's start to the end of its run (Kairos 4.3.2)."""
    runs: dict[str, list[CallSpan]] = defaultdict(list)
    for span in spans:
        runs[span.message_id].append(span)
    out: dict[str, list[float]] = defaultdict(list)
    for run in runs.values():
        end_s = max(s.end_s for s in run)
        for span in run:
            out[span.agent].append(end_s - span.start_s)
    return dict(out)


def classical_mds_1d(distances: np.ndarray) -> np.ndarray:
    """Torgerson's classical MDS into one dimension: double-centred squared distances, top eigenvector."""
    n = distances.shape[0]
    centring = np.eye(n) - np.ones((n, n)) / n
    gram = -0.5 * centring @ (distances ** 2) @ centring
    values, vectors = np.linalg.eigh(gram)
    return vectors[:, -1] * np.sqrt(max(values[-1], 0.0))


def anchor_distances_s(remaining_s: Mapping[str, Sequence[float]],
                       max_agents: int = MAX_ANCHOR_AGENTS) -> dict[str, float]:
    """Agent -> distance to the zero-latency anchor on the 1-D MDS line (Kairos 5.1), for the
    ``max_agents`` with the most samples; smaller first."""
    sampled = sorted((a for a, xs in remaining_s.items() if len(xs)), key=lambda a: (-len(remaining_s[a]), a))
    agents = sorted(sampled[:max_agents])
    if not agents:
        return {}
    samples = [list(remaining_s[a]) for a in agents] + [[0.0]]
    n = len(samples)
    distances = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            distances[i, j] = distances[j, i] = wasserstein_distance(samples[i], samples[j])
    coords = classical_mds_1d(distances)
    return {a: float(abs(coords[i] - coords[-1])) for i, a in enumerate(agents)}


class AgentStats:
    """What the monitor learns from finished calls (Kairos 4.1-5.1): their spans, each agent's
    single-request latency, and the agent priorities, refreshed off the request path."""

    def __init__(self, max_spans: int = 20_000) -> None:
        self.spans: deque[CallSpan] = deque(maxlen=max_spans)
        self.latency: OrderedDict[str, LatencySamples] = OrderedDict()
        """Per agent, most recently heard from last (at most ``MAX_AGENTS``)."""
        self.anchor_distance_s: dict[str, float] = {}
        self.expected_s: dict[str, float] = {}
        """Agent -> most likely execution time, for agents whose distribution has converged (Kairos 6, eq. 2)."""

    def record(self, span: CallSpan) -> None:
        self.spans.append(span)
        recent_entry(self.latency, span.agent, LatencySamples, MAX_AGENTS).add(span.end_s - span.start_s)

    def refresh(self, running_message_ids: Iterable[str] = ()) -> dict[str, float]:
        """Recompute the agent priorities from the runs that have finished (a run still going would
        cut its remaining latencies short), and the expected execution times."""
        self.expected_s = {a: s.mode_s() for a, s in self.latency.items() if s.converged}
        running = set(running_message_ids)
        self.anchor_distance_s = anchor_distances_s(remaining_latency_samples(s for s in self.spans
                                                                     if s.message_id not in running))
        return self.anchor_distance_s
