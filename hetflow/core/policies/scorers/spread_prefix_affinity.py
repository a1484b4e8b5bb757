"""Scorer: llm-d's prefix affinity, less the head of the prompt that more programs share than one engine
can take.

``prefix-affinity`` (llm-d's prefix-cache scorer) scores every engine by the share of the call's prompt
blocks it holds. A prefix that a share p of new programs carry draws all of them to the engines that
hold it; with p above one engine's share of the pool (1/N of N candidates), that is herding: on a pool
with room to spare, nothing waits and KV use is level, so nothing pulls the other way, and the engines
holding the agents' system prompt take 38-53% of the calls of four (issue 33; docs/history/results-log.md, "The
herding case"). A prefix a few programs share (a database's schema) is what the scorer is for: it
sends them where it is cached and partitions the programs by it.

This scorer keeps the recent first calls' leading blocks (each counted once however often it is decided
again) and, for each call, finds the *popular head*: its leading blocks that more than
``(1 + engine_share_tolerance) / N`` of those first calls carry. The share is of the programs that
compete for the engines now: the window holds the latest first calls, as many as the monitor counts
active programs (``EngineView.resident_programs``, plus the call's own) and at most
``window_first_calls``. A fixed count went stale when the mix of programs changed: after 120 programs
with prompts of their own, 40 agent programs sharing a system prompt were at most a quarter of the last
256 first calls, never popular, and herded onto two engines of four (docs/history/results-log.md, "The default
against vLLM's router, live"). The score is
``prefix-affinity``'s less that head, ``max(0, matched - head) / total``: engines still differ by the
rest of the match (a program's own context, a schema), not by a prefix every engine can hold after one
prefill. hetflow knows which calls start programs (the monitor's record of their dispatches); a router
that sees requests alone cannot tell a shared prefix's popularity among programs from its reuse within
one.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

from hetflow.core.call import LlmCall
from hetflow.core.plugins import plugin
from hetflow.core.policies.contracts import EngineScorer, PolicyStore, Prediction
from hetflow.core.snapshot import ClusterSnapshot, EngineView


@dataclass
class FirstCallPrefixes:
    """The leading blocks of the latest first calls (at most ``window``), and how many of them carry each block."""

    window: int
    carriers: Counter[int] = field(default_factory=Counter)
    recent: deque[tuple[str, tuple[int, ...]]] = field(default_factory=deque)
    recent_ids: set[str] = field(default_factory=set)

    def record(self, request_id: str, blocks: tuple[int, ...]) -> None:
        """Count a first call's blocks once, however often it is decided again (a held call)."""
        if request_id in self.recent_ids:
            return
        self.recent.append((request_id, blocks))
        self.recent_ids.add(request_id)
        self.carriers.update(blocks)
        self.keep_latest(self.window)

    def keep_latest(self, first_calls: int) -> None:
        """Forget all but the latest ``first_calls`` (at least one)."""
        while len(self.recent) > max(1, first_calls):
            old_id, old_blocks = self.recent.popleft()
            self.recent_ids.discard(old_id)
            for block in old_blocks:  # a block no call in the window carries is forgotten, not kept at 0
                left = self.carriers[block] - 1
                if left:
                    self.carriers[block] = left
                else:
                    del self.carriers[block]

    def popular_head(self, blocks: tuple[int, ...], max_share: float) -> int:
        """How many of ``blocks``' leading blocks more than ``max_share`` of the recent first calls carry
        (a chained hash's carriers never outnumber its parent's, so this is a leading run)."""
        limit = max_share * len(self.recent)
        head = 0
        for block in blocks:
            if self.carriers.get(block, 0) <= limit:
                break
            head += 1
        return head


@plugin("engine-scorer", "spread-prefix-affinity")
class SpreadPrefixAffinity(EngineScorer):
    reads_prefix = True
    reads_resident = True

    def __init__(self, max_prefix_blocks: int = 256, window_first_calls: int = 256,
                 engine_share_tolerance: float = 0.5) -> None:
        if max_prefix_blocks < 1 or window_first_calls < 1:
            raise ValueError("spread-prefix-affinity needs max_prefix_blocks and window_first_calls >= 1, got "
                             f"{max_prefix_blocks} and {window_first_calls}")
        if engine_share_tolerance < 0:
            raise ValueError(f"engine_share_tolerance must be >= 0, got {engine_share_tolerance}")
        self.max_prefix_blocks = max_prefix_blocks
        self.window_first_calls = window_first_calls
        self.engine_share_tolerance = engine_share_tolerance

    def score(self, call: LlmCall, engines: list[EngineView], snapshot: ClusterSnapshot, prediction: Prediction,
              store: PolicyStore) -> dict[str, float]:
        blocks = call.prefix_blocks[:self.max_prefix_blocks]
        if not blocks or not engines:
            return {e.engine_id: 0.0 for e in engines}
        prefixes = store.state_of(self.type_name, lambda: FirstCallPrefixes(self.window_first_calls))
        if not snapshot.program_dispatches:
            prefixes.record(call.request_id, blocks)
        prefixes.keep_latest(1 + sum(e.resident_programs for e in snapshot.engines))
        head = prefixes.popular_head(blocks, (1.0 + self.engine_share_tolerance) / len(engines))
        return {e.engine_id: max(0, min(e.prefix_match_blocks, len(blocks)) - head) / len(blocks) for e in engines}
