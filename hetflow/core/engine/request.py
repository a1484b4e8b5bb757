"""The engine's one request object (after vLLM v1's ``Request``): status, progress, ordering key."""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass, field

_arrival_seq = itertools.count()


class RequestStatus(enum.IntEnum):
    WAITING = 0      # in hetflow's queue
    RUNNING = 1      # in the batch (prefilling or decoding)
    PREEMPTED = 2    # evicted for memory; back in the queue, its KV to be recomputed
    FINISHED = 3
    ABORTED = 4


NORMAL_LEVEL = 0
PROMOTED_LEVEL = -1


@dataclass(eq=False)
class EngineRequest:
    """One LLM call inside an engine.

    Ordering key (Chimera 3.7): ``(starvation_level, priority, priority_tiebreak, arrival_s)``; lower is
    served first.
    """

    request_id: str
    prompt_tokens: int
    max_tokens: int
    priority: float
    """Lower first. Chimera: predicted total remaining tokens of the workflow (3.6)."""
    arrival_s: float
    program_id: str = ""
    priority_tiebreak: float = 0.0
    """Orders requests of equal priority before their arrival does (Kairos 5.2: the program's start)."""
    block_hashes: tuple[int, ...] = ()
    """Chained hashes of the prompt's full KV blocks, for prefix caching; empty: nothing to share."""
    prefix_hit_tokens: int = 0
    """Prompt tokens found in the prefix cache at admission, over every admission (after a preemption too)."""
    target_output_tokens: int | None = None
    """Simulated engines stop here (EOS); None lets the backend decide (real vLLM)."""
    retain_kv_s: float = 0.0
    """Keep the program's KV this long after the request finishes, for its next call (issue 35); 0 frees it."""
    reserve_output_tokens: int = 0
    """Output tokens the engine keeps KV room for while the request runs (issue 35: the predictor's upper
    quantile), so that running requests do not preempt each other; 0 reserves none (vLLM's admission)."""
    status: RequestStatus = RequestStatus.WAITING
    num_computed_tokens: int = 0
    """Tokens whose KV is in the cache."""
    output_tokens: int = 0
    starvation_level: int = NORMAL_LEVEL
    wait_start_iteration: int = 0
    """Scheduling iteration at which the request last entered the queue."""
    promoted_run_iterations: int = 0
    """Iterations run while promoted; demoted after the running quantum Q."""
    preemptions: int = 0
    first_scheduled_s: float | None = None
    first_token_s: float | None = None
    """When its first output token was produced (the end of its last prefill iteration)."""
    queued_since_s: float | None = None
    """When the request last entered the queue; None while it runs."""
    queued_intervals_s: list[tuple[float, float]] = field(default_factory=list)
    """Each wait as (entered queue, scheduled): the first wait and every wait after a preemption. A
    program's parallel calls wait at the same time, and its queueing share is the union of their waits."""
    finished_s: float | None = None
    finish_reason: str = ""
    seq: int = field(default_factory=lambda: next(_arrival_seq))
    """Tie-breaker for equal keys: order of creation."""

    @property
    def key(self) -> tuple[int, float, float, float, int]:
        return (self.starvation_level, self.priority, self.priority_tiebreak, self.arrival_s, self.seq)

    @property
    def queued_s(self) -> float:
        """Time spent waiting in the queue, summed over every wait."""
        return sum(end - start for start, end in self.queued_intervals_s)

    @property
    def seq_len(self) -> int:
        return self.prompt_tokens + self.output_tokens

    @property
    def output_limit(self) -> int:
        if self.target_output_tokens is None:
            return self.max_tokens
        return min(self.max_tokens, self.target_output_tokens)

    @property
    def tokens_to_compute(self) -> int:
        return self.seq_len - self.num_computed_tokens

    def __lt__(self, other: EngineRequest) -> bool:
        return self.key < other.key
