"""Client input to the balancer's call: a deadline already past is rejected, or served best effort
when configured so, never silently dropped."""

import pytest

from balancer_svc.config import BalancerConfig
from balancer_svc.convert import call_from_proto, stage_to_proto
from hetflow.client import build_request
from hetflow.core.errors import DeadlineExceeded, InvalidArgument
from hetflow.core.pipeline import Pipeline
from hetflow.core.policies.contracts import Choice, Prediction
from hetflow.core.policy_config import PolicyConfig, StageConfig
from tests.factories import engine, snapshot


def test_past_deadline_is_deadline_exceeded_by_default():
    with pytest.raises(DeadlineExceeded, match="deadline_unix_s"):
        call_from_proto(build_request(prompt="hi", max_tokens=4, deadline_unix_s=90.0), 1024, now_unix_s=100.0)


def test_past_deadline_best_effort_is_served_without_it_and_the_receipt_says_so():
    call = call_from_proto(build_request(prompt="hi", max_tokens=4, deadline_unix_s=90.0, program_id="p"), 1024,
                           now_unix_s=100.0, past_deadline="best-effort")
    assert call.workflow.deadline_unix_s == 0.0 and call.workflow.deadline_missed
    pipeline = Pipeline(PolicyConfig(StageConfig("least-load"), StageConfig("least-load"), StageConfig("urgency")))
    outcome = pipeline.decide(call, snapshot(engine("e", "m")), ["m"], {}, {"m": (Prediction(10), "")}, False)
    priority = next(s for s in outcome.stages if s.stage == "priority")
    assert priority.choice.rule.startswith("deadline-passed:best-effort") and "no-deadline" in priority.choice.rule


def test_unknown_past_deadline_mode_is_refused():
    with pytest.raises(ValueError, match="past_deadline"):
        BalancerConfig(past_deadline="ignore")


def test_a_scored_engine_choice_carries_every_scorer_value_into_the_receipt():
    choice = Choice("a", "max-score", scores={"a": 3.0, "b": 2.0}, params={"weight:queue": 2.0},
                    scorers={"queue": {"a": 0.0, "b": 1.0}, "prefix-affinity": {"a": 1.0, "b": 0.0}})
    proto = stage_to_proto("engine", "scored", choice, 0.1)
    assert dict(proto.scorers["queue"].per_engine) == {"a": 0.0, "b": 1.0}
    assert dict(proto.scorers["prefix-affinity"].per_engine) == {"a": 1.0, "b": 0.0}
    assert dict(proto.scores) == {"a": 3.0, "b": 2.0} and proto.params["weight:queue"] == 2.0


def test_a_call_carries_its_prompts_block_hashes_so_shared_prefixes_match():
    shared = "You are a careful planner. " * 10                          # 270 characters: 4 full blocks
    first = call_from_proto(build_request(prompt=shared + "Task A", max_tokens=4), 1024, now_unix_s=0.0)
    second = call_from_proto(build_request(prompt=shared + "Task B, longer", max_tokens=4), 1024, now_unix_s=0.0)
    assert len(first.prefix_blocks) == 4 and first.prefix_blocks == second.prefix_blocks[:4]


def test_a_stage_count_past_the_limit_is_an_invalid_argument_not_a_loop_over_its_stages():
    from hetflow.core.call import MAX_STAGES

    with pytest.raises(InvalidArgument, match="stage_count"):
        call_from_proto(build_request(prompt="hi", max_tokens=4, stage_index=1, stage_count=MAX_STAGES + 1), 100, 0.0)


def test_a_tenants_call_is_scoped_to_its_tenant_and_may_not_name_another():
    from balancer_svc.convert import scoped_to_caller
    from hetflow.runtime.security import ANYONE, Caller, PermissionDenied

    call = call_from_proto(build_request(prompt="hi", max_tokens=4, program_id="p1", request_id="r1"), 100, 0.0)
    scoped = scoped_to_caller(call, Caller("tenant", "team-a"))
    assert (scoped.request_id, scoped.workflow.program_id, scoped.workflow.tenant) == ("team-a/r1", "team-a/p1",
                                                                                       "team-a")
    assert scoped_to_caller(call, ANYONE) is call
    claims = call_from_proto(build_request(prompt="hi", max_tokens=4, tenant="team-b"), 100, 0.0)
    with pytest.raises(PermissionDenied):
        scoped_to_caller(claims, Caller("tenant", "team-a"))


def test_generate_metadata_names_the_program_when_the_workflow_does_not():
    from balancer_svc.convert import identified

    request = identified(build_request(prompt="hi", max_tokens=4), (("x-claude-code-session-id", "s1"),
                                                                   ("x-claude-code-agent-id", "explorer")), 0.0)
    wf = request.workflow
    assert (wf.program_id, wf.agent, wf.upstream_agent, wf.identity_source) == ("s1", "explorer", "", "claude-code")
    context = '{"task_id": "t1", "agent_id": "coder", "deadline_seconds": 5}'
    wf = identified(build_request(prompt="hi", max_tokens=4), (("agentic-context", context),
                                                               ("x-session-id", "ignored")), 100.0).workflow
    assert (wf.program_id, wf.agent, wf.deadline_unix_s, wf.identity_source) == ("t1", "coder", 105.0,
                                                                                 "agentic_context")


def test_the_requests_own_workflow_outranks_metadata_and_a_bare_call_stays_bare():
    from balancer_svc.convert import identified

    own = identified(build_request(prompt="hi", max_tokens=4, program_id="p1"), (("x-session-id", "s1"),), 0.0)
    assert (own.workflow.program_id, own.workflow.identity_source) == ("p1", "hetflow")
    bare = identified(build_request(prompt="hi", max_tokens=4), (("authorization", "Bearer k"),), 0.0)
    assert (bare.workflow.program_id, bare.workflow.identity_source) == ("", "")


def test_conflicting_or_malformed_identity_metadata_is_an_invalid_argument():
    from balancer_svc.convert import identified

    for metadata in ((("agentic-context", '{"task_id": "a"}'), ("agentic-context", '{"task_id": "b"}')),
                     (("x-session-id", "a"), ("x-session-id", "b")),
                     (("agent-hint", "[1]"),)):
        with pytest.raises(InvalidArgument):
            identified(build_request(prompt="hi", max_tokens=4), metadata, 0.0)


@pytest.mark.parametrize("metadata, program", [
    ((("x-session-id", "shared"),), "shared"),
    ((("x-claude-code-session-id", "shared"),), "shared"),
    ((("session-id", "shared"), ("thread-id", "w")), "shared"),
    ((("agent-hint", '{"session_id": "shared"}'),), "shared"),
    ((("agentic-context", '{"task_id": "shared", "agent_id": "a"}'),), "shared"),
])
def test_tenants_sharing_an_identity_get_programs_of_their_own_through_every_convention(metadata, program):
    from balancer_svc.convert import identified, scoped_to_caller
    from hetflow.runtime.security import Caller

    programs = set()
    for tenant in ("team-a", "team-b"):
        request = identified(build_request(prompt="hi", max_tokens=4), metadata, 0.0)
        call = scoped_to_caller(call_from_proto(request, 100, 0.0), Caller("tenant", tenant))
        programs.add(call.workflow.program_id)
    assert programs == {f"team-a/{program}", f"team-b/{program}"}


def test_generate_metadata_with_no_agent_names_it_by_the_instructions():
    from balancer_svc.convert import identified
    from hetflow.core.identity import agent_of_instructions
    from hetflow.v1 import common_pb2

    request = build_request(prompt="", max_tokens=4)
    request.messages.extend([common_pb2.ChatMessage(role="system", content="You triage."),
                             common_pb2.ChatMessage(role="user", content="go")])
    wf = identified(request, (("x-session-id", "s1"),), 0.0).workflow
    assert wf.agent == agent_of_instructions("You triage.")


def test_a_calls_prompt_tokens_are_its_servers_count_where_the_balancer_has_their_tokenizer():
    request = build_request([("user", "def add(a, b): return a + b")], max_tokens=8)
    counted = call_from_proto(request, 1024, 0.0, count_prompt=lambda prompt, messages: 7 * len(messages))
    assert counted.input_tokens == 7
    approximate = call_from_proto(request, 1024, 0.0)
    assert approximate.known_input_tokens is None and approximate.input_tokens > 0


def test_a_chat_of_empty_messages_is_a_call_and_a_request_with_neither_prompt_nor_messages_is_refused():
    """vLLM serves a chat whose messages are empty (its template renders them; ShareGPT has first questions
    shorter than the template's own tokens), so the balancer takes it as the gateway does."""
    call = call_from_proto(build_request([("system", ""), ("user", "")], max_tokens=4), 1024, now_unix_s=0.0)
    assert call.messages == (("system", ""), ("user", "")) and call.prefix_blocks == ()
    assert call_from_proto(build_request(prompt=" ", max_tokens=4), 1024, now_unix_s=0.0).prompt == " "
    with pytest.raises(InvalidArgument, match="must not be empty"):
        call_from_proto(build_request(max_tokens=4), 1024, now_unix_s=0.0)
