"""vLLM's router's Program scheduling as a preset: binding, admission by KV tokens, the active program's
bypass, the acting TTL, release and pause, cross-rank resume (vllm-project/router src/program_scheduling)."""

import math

import pytest

from hetflow.core import plugins
from hetflow.core.pipeline import Pipeline
from hetflow.core.policies.contracts import FinishedCall, PolicyStore, Prediction, WaitForCapacity
from hetflow.core.policies.program_admission import ledgers_of
from hetflow.core.policies.program_ledger import (
    HashRing,
    ProgramLedger,
    RankObservation,
    RouterProgram,
    SchedulingConfig,
    fitted_acting_ttl_s,
)
from hetflow.core.presets import apply_to_stack, resolve
from hetflow.core.snapshot import view_with
from tests.factories import call, engine, profile, snapshot

CAPACITY = 10_000


def pool(*usage: float, waiting: tuple[int, ...] = (), running: tuple[int, ...] = (), prefill_ms_per_token=0.01):
    """Engines e0.. with KV usage shares, capacity 10k tokens each."""
    slow = profile(prefill_ms_per_token=prefill_ms_per_token)
    return [view_with(engine(f"e{i}", "m", engine_profile=slow), kv_capacity_tokens=CAPACITY,
                      kv_cache_usage=u, waiting=(waiting[i] if waiting else 0), running=(running[i] if running else 0))
            for i, u in enumerate(usage)]


class Router:
    """The picker with its store, deciding at given times."""

    def __init__(self, **params) -> None:
        self.picker = plugins.build("engine-picker", "program-admission", params)
        self.store = PolicyStore()

    def pick(self, engines, now_s: float, program: str = "w1", agent: str = "a", tokens: int = 1000, received_s=None):
        c = call(program_id=program, agent=agent, input_tokens=tokens,
                 received_unix_s=now_s if received_s is None else received_s)
        return self.picker.pick(c, snapshot(*engines, taken_unix_s=now_s), "m", Prediction(1.0), self.store)

    def finish(self, engine_id: str, now_s: float, program: str = "w1", agent: str = "a", tokens: int = 1000,
               output: int = 100, resumes: bool = True, cached: int | None = None) -> None:
        c = call(program_id=program, agent=agent)
        self.picker.finished(FinishedCall(c.workflow, engine_id, now_s, tokens, output,
                                          tokens if cached is None else cached, resumes), self.store)

    @property
    def ledger(self):
        return ledgers_of(self.store)["m"]      # the pool of model "m"


def test_a_new_program_waits_for_its_home_rank_only():
    router = Router()
    engines = pool(0.0, 0.0)
    home = router.pick(engines, 0.0).chosen
    other = "e1" if home == "e0" else "e0"
    assert router.ledger.programs["w1:a"].last_engine == home
    full = [view_with(e, kv_cache_usage=0.95) if e.engine_id == home else e for e in engines]
    router2 = Router()
    with pytest.raises(WaitForCapacity):  # the other rank is empty, but a new program never moves
        router2.pick(full, 0.0)
    assert router2.ledger.programs["w1:a"].last_engine == home != other


def test_an_active_program_goes_to_its_rank_past_every_gate():
    router = Router()
    engines = pool(0.0, 0.0)
    home = router.pick(engines, 0.0).chosen
    router.finish(home, 1.0)
    router.ledger.programs["w1:a"].ttl_deadline_s = math.inf  # acting (as after a fitted TTL)
    router.ledger.programs["w1:a"].active = True
    jammed = [view_with(e, kv_cache_usage=1.0, waiting=9) for e in engines]
    assert router.pick(jammed, 1.5, tokens=1100).chosen == home
    assert router.pick(jammed, 1.5, tokens=1100).rule == "vllm-router:active-program"


def test_admission_counts_used_plus_the_programs_context_and_decode_buffer_against_capacity():
    one_rank = pool(0.89, running=(1,))  # vLLM reports 8,900 of 10,000 tokens in use
    assert Router().pick(one_rank, 0.0, tokens=1000).rule == "vllm-router:admitted"  # + 1,000 + 100 fits
    with pytest.raises(WaitForCapacity, match="waits for rank e0: KV tokens"):  # the receipt names the gate
        Router().pick(one_rank, 0.0, tokens=1001)


def test_vllms_waiting_queue_blocks_admission_even_when_forced():
    router = Router(force_resume_timeout_s=1.0)
    engines = pool(0.0, 0.0, waiting=(1, 1))
    with pytest.raises(WaitForCapacity, match="vLLM has waiting requests"):
        router.pick(engines, 0.0)
    with pytest.raises(WaitForCapacity, match="vLLM has waiting requests"):
        router.pick(engines, 5.0, received_s=0.0)


def test_the_count_guard_refuses_a_program_past_max_active_programs_and_says_so():
    router = Router(max_active_programs=2)
    one_rank = pool(0.0)
    for n in range(2):
        router.pick(one_rank, 0.0, program=f"w{n}")
    with pytest.raises(WaitForCapacity, match="waits for rank e0: 2 active programs"):
        router.pick(one_rank, 0.0, program="w2")


def test_a_forced_program_passes_capacity_after_the_force_resume_timeout():
    router = Router(force_resume_timeout_s=1.0)
    full = pool(1.0, 1.0, running=(1, 1))
    with pytest.raises(WaitForCapacity):
        router.pick(full, 0.0)
    assert router.pick(full, 1.0).rule == "vllm-router:forced"


@pytest.mark.parametrize("reported, rounds", [(False, [1, 1]), (True, [1, 2])])
def test_a_call_is_cache_continuous_only_where_the_servers_report_its_cached_tokens(reported, rounds):
    """The router reads a call's cached tokens from the response's usage alone (program_adapter.rs); vLLM
    sends none by default, so its second call of a program does not count as a round of the segment."""
    router = Router(servers_report_cached_tokens=reported)
    home = router.pick(pool(0.0), 0.0).chosen
    router.pick(pool(0.0), 0.5, tokens=1200)           # the active program's second call, while the first runs
    router.finish(home, 1.0, tokens=1000, cached=0)    # a program's first call is continuous by definition
    router.finish(home, 2.0, tokens=1200, cached=1000)
    assert list(router.ledger.window(home).rounds) == rounds


def test_an_acting_program_counts_its_observed_prompt_not_its_output_and_shrinks_after_two_smaller():
    """scheduler_state.rs ``observe_completed_context``: the output is counted once the next prompt carries it."""
    router = Router()
    home = router.pick(pool(0.0), 0.0, tokens=1000).chosen
    for t in (0.1, 0.2):                                    # three of its calls in flight at once
        router.pick(pool(0.0), t, tokens=1000)
    program = router.ledger.programs["w1:a"]
    router.finish(home, 1.0, tokens=1000, output=500)
    assert router.ledger.private_tokens(program) == 1000 + 100
    program.context_tokens = 3000                           # a later request raised it while another ran
    router.finish(home, 2.0, tokens=1000)
    assert program.context_tokens == 3000                   # one smaller observation: kept
    router.finish(home, 3.0, tokens=1000)
    assert program.context_tokens == 1000                   # the second in a row lowers it


def test_capacity_repair_counts_the_programs_already_marked_as_freed():
    """scheduler_lifecycle.rs ``repair_capacity``: ``future_private_relief`` spares a second reasoning program."""
    router = Router()
    engines = pool(0.0)
    for n in range(2):
        router.pick(engines, 0.0, program=f"w{n}", tokens=4000)
    ledger = router.ledger
    first, second = (ledger.programs[f"w{n}:a"] for n in range(2))
    first.pause_when_idle = True                            # marked by an earlier repair
    over = [view_with(engines[0], kv_cache_usage=0.6, running=1)]  # 6,000 in use x 2 reasoning / 1 running
    ledger.tick({e.engine_id: e for e in over}, {"e0": CAPACITY}, 5.0)
    assert ledger.used_tokens("e0") == 12_000
    assert not second.pause_when_idle                       # 12,000 - 4,100 marked fits: no more marking


def test_the_force_resume_timeout_counts_the_rounds_of_the_programs_queued_before_it_only():
    """scheduler_fairness.rs: the queued programs ahead of the candidate (``take_while``), not those after it."""
    router = Router(force_resume_timeout_s=1000.0, force_resume_floor_s=1.0)
    full = pool(1.0, running=(1,))
    for n in range(3):
        with pytest.raises(WaitForCapacity):
            router.pick(full, 0.0, program=f"w{n}")
    ledger = router.ledger
    window = ledger.window("e0")
    for t in range(ledger.config.stats_window_size):   # a mature window: 2 requests a second, 1 round each
        window.add(t * 0.5, 1, None, 10)
    first, last = (ledger._force_timeout_s(ledger.programs[f"w{n}:a"]) for n in (0, 2))
    assert (first, last) == (1.0, pytest.approx(3 * (2 + 2) / 2.0))  # the floor; 3 x (2 ahead x 2 rounds) / 2 a s


def test_without_mature_statistics_a_program_pauses_as_it_finishes_and_frees_its_tokens():
    router = Router()
    home = router.pick(pool(0.0, 0.0), 0.0).chosen
    assert router.ledger.used_tokens(home) == 1100
    router.finish(home, 2.0, output=50)
    program = router.ledger.programs["w1:a"]
    assert not program.active and program.was_paused and router.ledger.used_tokens(home) == 0


def test_a_program_that_will_not_resume_is_released_and_comes_back_as_a_new_generation():
    router = Router()
    home = router.pick(pool(0.0, 0.0), 0.0).chosen
    router.finish(home, 2.0, resumes=False)
    assert "w1:a" not in router.ledger.programs and router.ledger.generations["w1:a"] == 1
    router.pick(pool(0.0, 0.0), 3.0)
    assert router.ledger.programs["w1:a"].generation == 1


def test_with_mature_tool_gaps_a_finished_program_acts_for_its_fitted_ttl_then_pauses():
    router = Router(stats_window_size=2)
    engines = pool(0.0, 0.0, prefill_ms_per_token=2.0)  # a miss of 4,000 tokens costs about 15 s
    home = router.pick(engines, 0.0).chosen
    for t in (1.0, 3.0, 5.0):  # tool gaps of 1 s between a finish and the next call
        router.finish(home, t, tokens=4000)
        router.pick(engines, t + 1.0, tokens=4000)
    router.finish(home, 7.0, tokens=4000)
    program = router.ledger.programs["w1:a"]
    assert program.active and 7.0 < program.ttl_deadline_s <= 17.0 + 1e-9  # at most max_acting_ttl_s
    router.ledger.tick({e.engine_id: e for e in engines}, {"e0": CAPACITY, "e1": CAPACITY}, program.ttl_deadline_s)
    assert not program.active


def test_the_fitted_ttl_covers_short_gaps_and_is_zero_when_a_miss_costs_less_than_waiting():
    gaps = [0.5 * math.exp(0.1 * (i % 5 - 2)) for i in range(100)]
    assert 0.5 < fitted_acting_ttl_s(gaps, miss_impact_s=5.0, max_ttl_s=10.0) <= 5.0
    assert fitted_acting_ttl_s([30.0] * 100, miss_impact_s=1.0, max_ttl_s=10.0) == 0.0
    assert fitted_acting_ttl_s(gaps, miss_impact_s=5.0, max_ttl_s=0.0) == 0.0


def test_a_paused_program_resumes_elsewhere_only_with_the_sources_room_plus_its_context_to_spare():
    router = Router(stats_window_size=1)
    engines = pool(0.0, 0.0)
    home = router.pick(engines, 0.0).chosen
    other = "e1" if home == "e0" else "e0"
    router.finish(home, 1.0)  # immature TTL window: paused
    for e in (home, other):
        router.ledger.window(e).add(0.5, 1, None, 10)
    crowded = [view_with(e, kv_cache_usage=0.95 if e.engine_id == home else 0.0, running=1,
                         waiting=int(e.engine_id == home)) for e in engines]
    with pytest.raises(WaitForCapacity):  # queued less than a metrics interval
        router.pick(crowded, 2.0)
    choice = router.pick(crowded, 3.5)
    assert (choice.chosen, choice.rule) == (other, "vllm-router:cross-rank")


def test_the_ring_spreads_programs_over_ranks_and_keeps_each_where_it_was():
    ring = HashRing(["e0", "e1", "e2", "e3"], 160)
    homes = [ring.home(f"w{i}:a#0") for i in range(400)]
    assert all(60 < homes.count(e) < 140 for e in ring.engine_ids)
    assert homes == [HashRing(["e3", "e1", "e0", "e2"], 160).home(f"w{i}:a#0") for i in range(400)]


def test_the_preset_runs_in_the_simulator_only():
    preset = resolve("vllm-router-program")
    with pytest.raises(ValueError, match="simulator only"):
        apply_to_stack({"engines": []}, preset)
    with pytest.raises(ValueError, match="simulator only"):
        Pipeline(preset.policy)
    assert Pipeline(preset.policy, tells_completions=True).engine_picker.follows_completions


def test_bad_parameters_are_refused():
    for params in ({"cross_rank_headroom_ratio": 0.9}, {"stats_window_size": 0}, {"recheck_s": 0.0}):
        with pytest.raises(ValueError):
            plugins.build("engine-picker", "program-admission", params)


def test_with_a_session_header_every_agent_of_a_workflow_has_the_workflows_home():
    """identity.rs: a session header is the binding's hash key, whatever the program and its generation."""
    engines = pool(0.0, 0.0, 0.0, 0.0)
    homes = {}
    for session_header in (False, True):
        router = Router(session_header=session_header)
        homes[session_header] = {(w, a): router.pick(engines, 0.0, program=w, agent=a).chosen
                                 for w in ("w1", "w2", "w3") for a in ("planner", "coder", "tester", "critic")}
    for w in ("w1", "w2", "w3"):
        assert len({homes[True][(w, a)] for a in ("planner", "coder", "tester", "critic")}) == 1
    assert any(len({homes[False][(w, a)] for a in ("planner", "coder", "tester", "critic")}) > 1
               for w in ("w1", "w2", "w3"))  # without one, each agent's first request hashes apart


def homes(strategy: str, programs: int, usage=(0.0, 0.0, 0.0), tokens: int = 1000) -> list[str]:
    """The home rank of each new program, one per second, every one admitted and still active."""
    router = Router(binding_strategy=strategy)
    engines = pool(*usage)
    return [router.pick(engines, float(i), program=f"w{i}", tokens=tokens).chosen for i in range(programs)]


def test_round_robin_binding_takes_the_ranks_in_turn():
    """binding/mod.rs ``program_round_robin``: a counter over the ranks sorted by id."""
    assert homes("program_round_robin", 6) == ["e0", "e1", "e2", "e0", "e1", "e2"]


def test_least_program_count_binds_to_the_rank_with_the_fewest_accounted_programs():
    """binding/mod.rs ``least_program_count``: the fewest active and waiting programs, the first by id on a tie."""
    assert homes("least_program_count", 6) == ["e0", "e1", "e2", "e0", "e1", "e2"]
    router = Router(binding_strategy="least_program_count")
    engines = pool(0.0, 0.0)
    router.pick(engines, 0.0, program="w0")
    router.finish("e0", 0.5, program="w0", resumes=False)                 # released: e0 counts none again
    assert router.pick(engines, 1.0, program="w1").chosen == "e0"


def test_token_balance_binds_where_the_most_capacity_is_left_over_the_accounted_programs():
    """binding/mod.rs ``reasoning_token_balance``: capacity less the accounted programs' private tokens."""
    router = Router(binding_strategy="reasoning_token_balance")
    engines = pool(0.0, 0.0, 0.0)
    assert router.pick(engines, 0.0, program="big", tokens=5000).chosen == "e0"
    assert [router.pick(engines, 1.0 + i, program=f"w{i}", tokens=1000).chosen for i in range(3)] == ["e1", "e2", "e1"]


def test_an_unknown_binding_strategy_is_refused():
    with pytest.raises(ValueError, match="binding_strategy"):
        Router(binding_strategy="cache_aware")


def rank_with_one_running_program(used_tokens: float, decode_s: float | None, batch_gain: bool = True,
                                  output_tokens: int = 10):
    """A ledger whose rank e0 (10k tokens) runs one program of 2,000 tokens (2 target rounds left, a miss of
    it costs 1 s) under a mature window (1 round since pause, 1,000 tokens of growth, ``decode_s`` each), and
    a candidate of 2,000 tokens: its reserve, 1,000 x (2 + 2), refuses wherever ``used_tokens`` > 3,900.
    Decode throughput ``B / (0.01 + 0.001 B)``: a second request gains 83.3%; a cold prefill costs 1 ms a token."""
    config = SchedulingConfig(True, 64, 1, 100, 10.0, 100, 300.0, 1.0, 1.2, batch_gain_admission=batch_gain)
    ledger = ProgramLedger(config, lambda tokens: tokens * 1e-3, lambda batch, _: batch / (0.01 + 0.001 * batch))
    for t in range(config.stats_window_size):
        ledger.window("e0").add(t * 0.5, 1, 1000, output_tokens, decode_s)
    ledger.capacity_tokens = {"e0": CAPACITY}
    ledger.observations["e0"] = RankObservation(0.0, used_tokens, 0)
    ledger.programs["w0:a"] = RouterProgram("w0:a", 0, "e0", active=True, in_flight=1, context_tokens=2000,
                                            last_miss_impact_s=1.0)
    ledger.active["e0"] = {"w0:a"}
    candidate = ledger.programs["w1:a"] = RouterProgram("w1:a", 0, "e0", context_tokens=2000)
    return ledger, candidate


def test_batch_gain_admits_past_the_growth_reserve_when_the_decode_gained_pays_for_the_miss_and_continuity():
    """policy.rs ``estimate_batch_gain``: gain 6 s x 0.833 = 5 s >= 2 s of cold prefill + (2 - 0.9) / 0.9 x 1 s
    of continuity (room 5,000: the protected 2 rounds before, (5,000 - 2,100 - 2 x 1,000) / 1,000 after)."""
    ledger, candidate = rank_with_one_running_program(5000.0, decode_s=6.0)
    admission = ledger.admit(candidate, 0.0)
    assert admission is not None and admission.rule == "batch-gain" and admission.reserve_tokens == 4000
    assert candidate.active and candidate.last_engine == "e0"


@pytest.mark.parametrize("used, decode_s, batch_gain", [
    (5000.0, 3.6, True),     # gain 3 s < 2 s + 1.22 s
    (7500.0, 60.0, True),    # the room left after it holds no protected round: the loss is infinite
    (5000.0, 6.0, False),    # enable_batch_gain_admission off
])
def test_batch_gain_refuses_when_it_does_not_pay_leaves_no_protected_round_or_is_off(used, decode_s, batch_gain):
    ledger, candidate = rank_with_one_running_program(used, decode_s, batch_gain)
    assert ledger.admit(candidate, 0.0) is None and ledger.refusal == "e0: growth reserve"
    assert not candidate.active


@pytest.mark.parametrize("output_tokens, admitted", [(600, True), (10, False)])
def test_batch_gain_takes_the_decode_time_from_completions_where_no_response_was_streamed(output_tokens, admitted):
    """No decode time in the window: ``B x mean output / throughput before``, 1 x 600 / 90.9 = 6.6 s (gains
    5.5 s, past 3.22) or 1 x 10 / 90.9 = 0.11 s (too little: the reserve holds)."""
    ledger, candidate = rank_with_one_running_program(5000.0, decode_s=None, output_tokens=output_tokens)
    assert (ledger.admit(candidate, 0.0) is not None) is admitted


def test_batch_gain_never_bypasses_the_kv_tokens_gate():
    """8,000 used + 2,100 required is past the 10,000 tokens themselves: no gain admits it."""
    ledger, candidate = rank_with_one_running_program(8000.0, decode_s=600.0)
    assert ledger.admit(candidate, 0.0) is None and ledger.refusal == "e0: KV tokens"


def test_a_finished_call_gives_its_rank_its_decode_time_and_its_program_the_cost_of_a_miss():
    """scheduler_lifecycle.rs ``complete``: the window's decode sample and ``last_cache_miss_impact_seconds``."""
    ledger, _ = rank_with_one_running_program(5000.0, decode_s=6.0)
    ledger.finish("w0:a", "e0", 3000, 50, 0, True, 100.0, decode_s=4.5)
    assert ledger.window("e0").decode_s[-1] == 4.5
    assert ledger.programs["w0:a"].last_miss_impact_s == pytest.approx(3.0)
