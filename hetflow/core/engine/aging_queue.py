"""The engine's waiting queue: a min-heap on (starvation_level, priority, tiebreak, arrival) with aging.

Chimera 3.7: a queued request counts the consecutive scheduling iterations it was not selected;
once that count reaches the starvation threshold S it is promoted (starvation_level - 1) and sorts
ahead of every normal request. After it has run for the running quantum Q iterations it is demoted
(starvation_level + 1; see ``note_running_iteration``).

Every waiting request ages one per iteration, so the next to reach S is always the one that has
waited longest: a FIFO by wait start finds them in O(1), and promotion is a re-push with a new key,
the old heap entry left behind and skipped (lazy deletion). push, pop and promote are O(log n).
"""

from __future__ import annotations

import collections
import heapq

from hetflow.core.engine.request import NORMAL_LEVEL, PROMOTED_LEVEL, EngineRequest, RequestStatus
from hetflow.core.plugins import plugin


def starvation_count(wait_start_iteration: int, iteration: int) -> int:
    """Consecutive scheduling iterations a request queued after ``wait_start_iteration`` was not
    selected in, as iteration ``iteration`` starts (Chimera 3.7's starvation_count)."""
    return max(0, iteration - 1 - wait_start_iteration)


@plugin("engine-queue", "priority")
class AgingPriorityQueue:
    def __init__(self, starvation_threshold: int = 100, running_quantum: int = 50) -> None:
        """``starvation_threshold``: S, consecutive scheduling iterations a request may wait before it is
        promoted; ``running_quantum``: Q, iterations a promoted request runs before it is demoted."""
        if starvation_threshold < 1 or running_quantum < 1:
            raise ValueError("starvation_threshold (S) and running_quantum (Q) must be >= 1")
        self.starvation_threshold = starvation_threshold
        self.running_quantum = running_quantum
        self._heap: list[tuple[tuple[int, float, float, float, int], int, EngineRequest]] = []
        self._by_wait_start: collections.deque[tuple[int, int, EngineRequest]] = collections.deque()
        self._queued: dict[str, tuple[int, EngineRequest]] = {}  # id -> (entry version, request)
        self._version = 0
        self.promotions = 0

    def __len__(self) -> int:
        return len(self._queued)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._queued

    def requests(self) -> list[EngineRequest]:
        return [req for _, req in self._queued.values()]

    def push(self, req: EngineRequest, iteration: int) -> None:
        """Queue ``req``; its starvation count starts at zero at ``iteration``."""
        req.wait_start_iteration = iteration
        version = self._push_entry(req)
        self._by_wait_start.append((iteration, version, req))

    def age(self, iteration: int) -> None:
        """Called as scheduling iteration ``iteration`` starts: promote every request whose
        starvation_count has reached S (Chimera 3.7). A request queued after iteration ``w`` was passed
        over by iterations w+1 .. iteration-1, so its count is ``iteration - 1 - w``."""
        while self._by_wait_start:
            wait_start, version, req = self._by_wait_start[0]
            if starvation_count(wait_start, iteration) < self.starvation_threshold:
                break
            self._by_wait_start.popleft()
            if self._queued.get(req.request_id, (None,))[0] != version:
                continue  # left the queue or re-pushed since
            if req.starvation_level == NORMAL_LEVEL:
                req.starvation_level = PROMOTED_LEVEL
                req.promoted_run_iterations = 0
                self.promotions += 1
                self._push_entry(req)

    def peek(self) -> EngineRequest | None:
        self._drop_stale()
        return self._heap[0][2] if self._heap else None

    def pop(self) -> EngineRequest:
        self._drop_stale()
        _, _, req = heapq.heappop(self._heap)
        del self._queued[req.request_id]
        return req

    def remove(self, request_id: str) -> EngineRequest | None:
        entry = self._queued.pop(request_id, None)
        return entry[1] if entry else None

    def note_running_iteration(self, req: EngineRequest) -> None:
        """A promoted request ran one iteration; after Q of them it is demoted (Chimera 3.7)."""
        if req.starvation_level < NORMAL_LEVEL and req.status == RequestStatus.RUNNING:
            req.promoted_run_iterations += 1
            if req.promoted_run_iterations >= self.running_quantum:
                req.starvation_level += 1
                req.promoted_run_iterations = 0

    def _push_entry(self, req: EngineRequest) -> int:
        self._version += 1
        self._queued[req.request_id] = (self._version, req)
        heapq.heappush(self._heap, (req.key, self._version, req))
        return self._version

    def _drop_stale(self) -> None:
        while self._heap:
            _, version, req = self._heap[0]
            if self._queued.get(req.request_id, (None,))[0] == version:
                return
            heapq.heappop(self._heap)
