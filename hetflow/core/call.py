"""The balancer's one request object: a validated LLM call with its workflow metadata."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from hetflow.core.errors import InvalidArgument
from hetflow.core.tokens import count_tokens

MAX_STAGES = 10_000
"""No workflow has more stages: a stage count above it is an error, not a loop over billions of stages."""


def check_stages(stage_index: int, stage_count: int, where: str = "workflow", both_set: bool = False) -> None:
    """``stage_count`` and ``stage_index`` at most ``MAX_STAGES``, and ``stage_index`` in 1..``stage_count``
    when the caller set both (``both_set``), else in 0..``stage_count`` (0: unknown) when the count is known."""
    if stage_count > MAX_STAGES:
        raise InvalidArgument(f"{where}.stage_count must be at most {MAX_STAGES}, got {stage_count}")
    if stage_index > MAX_STAGES:
        raise InvalidArgument(f"{where}.stage_index must be at most {MAX_STAGES}, got {stage_index}")
    if (both_set or stage_count) and not int(both_set) <= stage_index <= stage_count:
        raise InvalidArgument(f"{where}.stage_index must be in 1..stage_count ({stage_count}), got {stage_index}")


@dataclass(frozen=True)
class SamplingSpec:
    max_tokens: int
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    ignore_eos: bool = False
    stop: tuple[str, ...] = ()
    presence_penalty: float | None = None
    frequency_penalty: float | None = None


OPTIONAL_SAMPLING_FIELDS = ("temperature", "top_p", "seed", "presence_penalty", "frequency_penalty")
"""``SamplingSpec``'s fields that are None when the caller set none: passed to the engine only when set."""


@dataclass(frozen=True)
class WorkflowInfo:
    program_id: str
    workflow: str = ""
    agent: str = ""
    stage_index: int = 0
    """1-based; 0 when unknown."""
    stage_count: int = 0
    upstream_agent: str = ""
    tenant: str = ""
    deadline_unix_s: float = 0.0
    deadline_missed: bool = False
    """The call came after its program's deadline and is served best effort, without one."""
    identity_source: str = ""
    """The convention that named the program (``hetflow.core.identity``); "" when not told."""
    stages_inferred: bool = False
    """``stage_index`` and ``stage_count`` were inferred by the monitor (Kairos 4.2), not told."""


@dataclass(frozen=True)
class StageInference:
    """A call's stage position and count as the monitor inferred them for a call that came without
    (Kairos 4.2, ``hetflow.core.monitor.workflow_graph``), and from what."""

    stage_index: int
    stage_count: int
    """0 while no finished run of the workflow has been seen."""
    runs_seen: int
    """Finished runs of the workflow the count comes from."""


@dataclass(frozen=True)
class LlmCall:
    request_id: str
    prompt: str
    messages: tuple[tuple[str, str], ...]
    sampling: SamplingSpec
    workflow: WorkflowInfo
    model_pin: str = ""
    want_receipt: bool = False
    received_unix_s: float = 0.0
    known_input_tokens: int | None = None
    """The prompt's length when the caller knows it better than the text does: a simulated call, whose
    text stands in for a prompt it does not spell out."""
    prefix_blocks: tuple[int, ...] = ()
    """Chained hashes of the prompt's full blocks (``hetflow.core.prefix``): what it shares with the
    prompts engines were sent before."""
    accept_wait_s: float | None = None
    """How long the call waited between its client's send and the balancer taking it
    (``hetflow.runtime.accept_wait``); None when not known."""

    # Computed once per call (a frozen dataclass keeps ``cached_property``'s value in its ``__dict__``): a
    # decision reads them many times, and an agent's prompt runs to tens of thousands of tokens.
    @functools.cached_property
    def system_prompt(self) -> str:
        return "\n".join(c for r, c in self.messages if r == "system")

    @functools.cached_property
    def user_prompt(self) -> str:
        """What the router reads: the last user turn, or the whole prompt."""
        users = [c for r, c in self.messages if r == "user"]
        return users[-1] if users else self.prompt

    @functools.cached_property
    def full_input(self) -> str:
        return self.prompt or "\n".join(c for _, c in self.messages)

    @functools.cached_property
    def system_prompt_tokens(self) -> int:
        return count_tokens(self.system_prompt)

    @functools.cached_property
    def user_prompt_tokens(self) -> int:
        if self.known_input_tokens is None and self.user_prompt is self.full_input:  # a prompt, not a chat
            return self.input_tokens
        return count_tokens(self.user_prompt)

    @functools.cached_property
    def input_tokens(self) -> int:
        return self.known_input_tokens if self.known_input_tokens is not None else count_tokens(self.full_input)


def stages_unknown(call: LlmCall) -> bool:
    """A call of a program that names neither its stage position nor its count: the monitor infers them
    (Kairos 4.2, ``MonitorState.infer_stages``)."""
    wf = call.workflow
    return bool(wf.program_id) and not wf.stage_index and not wf.stage_count


def with_stages(call: LlmCall, stage_index: int, stage_count: int) -> LlmCall:
    """The call at the stage position and count inferred for it."""
    return replace(call, workflow=replace(call.workflow, stage_index=stage_index, stage_count=stage_count,
                                          stages_inferred=True))
