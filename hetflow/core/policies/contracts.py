"""The contracts of the balancer's policies: what each stage's plugin implements and what it is handed
and returns (the stages and their order: ``hetflow.core.policies``). Each result carries the numbers it
decided on and the rule that decided, for the receipt. Policies hold no state of their own between
decisions: what persists (HexGen-Flow's tunable alpha, round-robin turns, a plugin's ledger) lives in the
``PolicyStore`` the pipeline hands them, a plugin's own under its key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, NamedTuple, TypeVar, cast

from hetflow.core.call import LlmCall, WorkflowInfo
from hetflow.core.cost import call_output_tokens, compute_cost_s, mean_compute_cost_s
from hetflow.core.errors import Unavailable
from hetflow.core.room import WorkingSetRoom
from hetflow.core.snapshot import ClusterSnapshot, EngineView

StateT = TypeVar("StateT")

@dataclass(frozen=True)
class Choice:
    chosen: str
    rule: str
    scores: Mapping[str, float] = field(default_factory=dict)
    loads: Mapping[str, float] = field(default_factory=dict)
    params: Mapping[str, float] = field(default_factory=dict)
    scorers: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    """Each scorer's value per engine, for a choice made by weighted scorers."""


class Priority(NamedTuple):
    """A call's place in its engine's queue, lower first: ``key``, then ``tiebreak`` among equal keys,
    then arrival at the engine (Chimera 3.7's ``(starvation_level, priority, arrival)`` with the
    tiebreak a rule may need: Kairos orders by agent, then by program start)."""

    key: float
    tiebreak: float = 0.0


@dataclass(frozen=True)
class Prediction:
    median_tokens: float
    quantile_tokens: Mapping[float, float] = field(default_factory=dict)


@dataclass(frozen=True)
class FinishedCall:
    """A finished call as a router in front of the engines sees it in the response's usage."""

    workflow: WorkflowInfo
    engine_id: str
    finished_s: float
    prompt_tokens: int
    output_tokens: int
    cached_prompt_tokens: int
    agent_resumes: bool
    """Whether the call's agent has a later call in its workflow (vLLM's ``expected_resume``)."""
    decode_s: float | None = None
    """From its first streamed chunk to its end, as the router times it: vLLM streams its first chunk with
    the first output token; None where there was none (no token, or a response not streamed)."""


@dataclass
class PolicyStore:
    """What persists between decisions; one per pipeline, handed to every stage."""

    alpha: float | None = None
    """HexGen-Flow's alpha (eq. 4) of the engine stage: its configured value at first, then what the
    tuner (4.3) sets; None when the engine stage has none."""
    turns: dict[str, int] = field(default_factory=dict)
    """Decisions taken so far per rotation (round robin's turn, vLLM's rotating scan start)."""
    waiting_calls: int = 0
    """Calls waiting at the balancer for a decision now, the one being decided included: the hold
    queue, and the call if it is not held (a new one). Set by the caller before each decision; the RL
    router's queue length w_q (load-balancer paper 4.3), which in training counts the request being
    routed too."""
    call_is_held: bool = False
    """Whether the call being decided is one the hold queue holds (decided again in a round), set with
    ``waiting_calls``: the RL router lets a call it held wait for room undecided."""
    plugin_state: dict[str, Any] = field(default_factory=dict)
    """Each plugin's own state between decisions, under its type name (the Gateway API Inference
    Extension's ``CycleState``): ``state_of`` makes it at the plugin's first decision."""

    def next_turn(self, rotation: str) -> int:
        """This decision's turn of ``rotation`` (0, 1, 2, ...)."""
        turn = self.turns.get(rotation, 0)
        self.turns[rotation] = turn + 1
        return turn

    def state_of(self, key: str, make: Callable[[], StateT]) -> StateT:
        """The state kept under ``key`` (a plugin's type name), made by ``make`` the first time."""
        if key not in self.plugin_state:
            self.plugin_state[key] = make()
        return cast(StateT, self.plugin_state[key])


@dataclass(frozen=True)
class PriorityContext:
    """What a priority rule may read besides the call: the time of the decision, the engine the call
    goes to, the cluster, and the call's cost figures, computed once per decision (``for_call``) for
    the rule and the decision alike."""

    now_s: float
    engine: EngineView
    snapshot: ClusterSnapshot
    output_tokens: float
    """L_out-hat of the call (``cost.call_output_tokens``)."""
    compute_cost_s: float
    """t_comp of the call on ``engine`` (HexGen-Flow eq. 2)."""
    mean_cost_s: float
    """t-bar_comp of the call over every instance (HexGen-Flow eq. 6)."""

    @classmethod
    def for_call(cls, call: LlmCall, prediction: Prediction, now_s: float, engine: EngineView,
                 snapshot: ClusterSnapshot) -> PriorityContext:
        output = call_output_tokens(call, prediction)
        return cls(now_s, engine, snapshot, output, compute_cost_s(engine, call.input_tokens, output),
                   mean_compute_cost_s(snapshot.engines, call.input_tokens, output))


class WaitForCapacity(Exception):
    """No engine can take the call now, but one will: the caller holds the call and decides again
    after ``retry_after_s`` (Kairos 6: the request stays in the scheduling queue). The pipeline adds
    the priority the call holds its place in the hold queue by."""

    def __init__(self, message: str, retry_after_s: float, priority: Priority | None = None) -> None:
        super().__init__(message)
        self.retry_after_s, self.priority = retry_after_s, priority


class ModelPicker:
    type_name: str
    engine_first = False
    """Whether the engine stage chooses among every candidate model's engines and the model follows the
    engine (a router that knows engines, not models: vLLM's, llm-d's, SGLang's, Dynamo's)."""
    needs_router = False
    """Whether it reads the router's confidences (Chimera Algorithm 1, lines 4-5)."""
    program_affinity = False
    """Whether a program keeps the model of its first call (Chimera Algorithm 1, line 2)."""

    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, confidence: Mapping[str, float],
             predictions: Mapping[str, Prediction], store: PolicyStore) -> Choice:
        raise NotImplementedError

    def reads_confidence(self, call: LlmCall, snapshot: ClusterSnapshot) -> bool:
        """Whether the router's confidences can change this call's pick among ``snapshot``'s engines (the
        candidates'): when they cannot, the router is not asked, and its encoder spends nothing on it."""
        return self.needs_router


class EngineFilter:
    """Keeps the engines a call may go to; raises ``WaitForCapacity`` when none may now."""

    type_name: str
    plans_memory = False
    """Whether decisions carry the call's memory plan for the engine's ledger (Kairos 6)."""
    reads_resident = False
    """Whether it reads each engine's active programs (``EngineView.resident_tokens``,
    ``resident_growth_tokens``, ``resident_programs``): a snapshot counts them only then."""

    def keep(self, call: LlmCall, engines: list[EngineView], snapshot: ClusterSnapshot,
             prediction: Prediction) -> list[EngineView]:
        raise NotImplementedError

    def admit_room(self, call: LlmCall, engine: EngineView, snapshot: ClusterSnapshot,
                   prediction: Prediction) -> WorkingSetRoom | None:
        """The room the filter let the call onto ``engine`` for, which the monitor checks again when the
        call is admitted (``hetflow.core.room``); None: nothing to check."""
        return None


class EngineScorer:
    """Scores each engine for a call, in [0, 1], higher better (the Gateway API Inference Extension's
    scorer contract)."""

    type_name: str
    reads_prefix = False
    """Whether it reads how much of the call's prompt each engine holds (``prefix_match_blocks``)."""
    reads_resident = False
    """Whether it reads each engine's active programs (``EngineView.resident_tokens``,
    ``resident_growth_tokens``, ``resident_programs``): a snapshot counts them only then."""
    initial_alpha: float | None = None
    """The alpha the policy store starts from, for a scorer with one (HexGen-Flow eq. 4)."""

    def score(self, call: LlmCall, engines: list[EngineView], snapshot: ClusterSnapshot, prediction: Prediction,
              store: PolicyStore) -> dict[str, float]:
        raise NotImplementedError


class EnginePicker:
    type_name: str
    reads_in_flight_calls = False
    """Whether it reads each engine's in-flight calls (``EngineView.in_flight_calls``): the monitor sends
    them only then."""
    reads_prefix = False
    """Whether it reads how much of the call's prompt each engine holds (``prefix_match_blocks``): the
    snapshot matches the call's blocks against every engine's index only then."""
    reads_resident = False
    """Whether it reads each engine's active programs (``EngineView.resident_tokens``,
    ``resident_growth_tokens``, ``resident_programs``): a snapshot counts them only then."""
    plans_memory = False
    """Whether decisions carry the call's memory plan for the engine's ledger (Kairos 6)."""
    initial_alpha: float | None = None
    """The alpha the store starts from; None when the stage has no alpha to tune."""
    follows_completions = False
    """Whether it learns from finished calls (``finished``), as a router that proxies the responses does;
    the simulator tells it of each."""

    def pick(self, call: LlmCall, snapshot: ClusterSnapshot, model: str, prediction: Prediction,
             store: PolicyStore) -> Choice:
        raise NotImplementedError

    def finished(self, call: FinishedCall, store: PolicyStore) -> None:
        """A call it placed has finished (only called when ``follows_completions``)."""
        raise NotImplementedError

    def admit_room(self, call: LlmCall, engine: EngineView, snapshot: ClusterSnapshot,
                   prediction: Prediction) -> WorkingSetRoom | None:
        """The working-set room its choice of ``engine`` assumed (``EngineFilter.admit_room``); None: none."""
        return None


class PriorityRule:
    type_name: str
    prediction_target = "workflow"
    """What the prediction it reads estimates: ``workflow`` (total remaining tokens) or ``call`` (its own)."""
    needs_agent_stats = False
    """Whether it reads the monitor's agent statistics (the simulator refreshes them only then)."""

    def priority(self, call: LlmCall, prediction: Prediction, context: PriorityContext) -> tuple[Priority, Choice]:
        raise NotImplementedError


class RetentionRule:
    """How long the chosen engine keeps the call's program's KV after the call finishes, for the program's
    next call (issue 35; Continuum, arXiv 2511.02230); 0 frees it at once; None: the rule decides no hold
    (the KV stays cached until an allocation evicts it, and the monitor counts the program as resident for
    its idle time)."""

    type_name: str

    def hold_s(self, call: LlmCall, context: PriorityContext) -> tuple[float | None, Choice]:
        raise NotImplementedError


class ReserveRule:
    """How many output tokens the chosen engine keeps KV room for while the call runs (issue 35: room
    reserved for decode growth); 0 reserves none."""

    type_name: str

    def reserve_tokens(self, call: LlmCall, prediction: Prediction, context: PriorityContext) -> tuple[int, Choice]:
        raise NotImplementedError


def min_max_scores(values: Mapping[str, float], lower_is_better: bool = True) -> dict[str, float]:
    """Each value's place between the best (1) and the worst (0) of them; all 1 when they are equal (the
    Gateway API Inference Extension's queue scorer normalisation)."""
    low, high = min(values.values()), max(values.values())
    if high == low:
        return {k: 1.0 for k in values}
    return {k: ((high - v) if lower_is_better else (v - low)) / (high - low) for k, v in values.items()}


def healthy_or_unavailable(snapshot: ClusterSnapshot, model: str | None = None) -> list[EngineView]:
    """The healthy engines (of ``model``; of every model when it is None or ""), or UNAVAILABLE naming
    what has none."""
    model = model or None
    engines = snapshot.healthy_engines(model)
    if not engines:
        raise Unavailable(f"no healthy engine for model {model!r}" if model else "no healthy engine")
    return engines
