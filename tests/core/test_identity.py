"""The ecosystem's identity conventions mapped onto hetflow's program, agent and upstream agent."""

import json

import pytest

from hetflow.core import identity
from hetflow.core.identity import Conventions, Identity, IdentityError, resolve

NOW_S = 1_900_000_000.0


def headers(**named: str) -> dict[str, list[str]]:
    return {name.replace("_", "-"): [value] for name, value in named.items()}


def refused(conventions: Conventions) -> IdentityError:
    with pytest.raises(IdentityError) as caught:
        resolve(conventions, NOW_S)
    return caught.value


def test_agentic_context_scoped_program_ids_become_the_task_and_its_agents():
    context = {"program_id": "task-a:researcher", "task_id": "task-a", "agent_id": "researcher",
               "parent_program_id": "task-a:lead", "step_id": 7, "deadline_seconds": 30, "expected_resume": True}
    assert resolve(Conventions(agentic_context=context), NOW_S) == Identity(
        "agentic_context", "task-a", "researcher", "lead", NOW_S + 30)


def test_agentic_context_as_a_json_string_and_without_a_task_splits_the_program_id():
    context = json.dumps({"program_id": "run-9:coder", "parent_agent_id": "planner"})
    assert resolve(Conventions(agentic_context=context), NOW_S) == Identity("agentic_context", "run-9", "coder",
                                                                            "planner")


def test_agentic_context_with_only_a_session_names_that_program():
    found = resolve(Conventions(agentic_context={"session_id": "s1", "agent_id": "s1:worker"}), NOW_S)
    assert (found.program_id, found.agent, found.upstream_agent) == ("s1", "worker", "")


def test_agent_hint_is_a_two_level_tree_under_the_parent_session():
    root = resolve(Conventions(agent_hint={"session_id": "root", "blocks_parent": False}), NOW_S)
    child = resolve(Conventions(agent_hint={"session_id": "child", "parent_session_id": "root"}), NOW_S)
    assert root == Identity("agent_hint", "root", "root", "")
    assert child == Identity("agent_hint", "root", "child", "root")


@pytest.mark.parametrize("sent, expected", [
    (headers(x_claude_code_session_id="c1", x_claude_code_agent_id="explorer",
             x_claude_code_parent_agent_id="planner"), Identity("claude-code", "c1", "explorer", "planner")),
    (headers(x_claude_code_session_id="c1"), Identity("claude-code", "c1", "", "")),   # unnamed: by instructions
    (headers(session_id="x1", thread_id="worker"), Identity("codex", "x1", "worker", "")),
    (headers(x_session_id="g1"), Identity("x-session-id", "g1", "", "")),
])
def test_each_header_schema_names_the_session_as_the_program(sent, expected):
    assert resolve(Conventions(headers=sent), NOW_S) == expected


def test_precedence_is_agentic_context_then_agent_hint_then_one_header_schema():
    all_three = Conventions(agentic_context={"task_id": "t"}, agent_hint={"session_id": "h"},
                            headers=headers(x_session_id="g", session_id="x"))
    assert resolve(all_three, NOW_S).source == "agentic_context"
    assert resolve(Conventions(agent_hint={"session_id": "h"}, headers=all_three.headers), NOW_S).source == "agent_hint"
    assert resolve(Conventions(headers=all_three.headers), NOW_S) == Identity("codex", "x", "", "")


def test_schemas_never_mix():
    """A Claude Code session with a Codex thread header: the thread header is not read."""
    sent = headers(x_claude_code_session_id="c1", thread_id="worker")
    assert resolve(Conventions(headers=sent), NOW_S) == Identity("claude-code", "c1", "", "")


def test_an_agent_no_convention_names_is_named_by_its_instructions():
    triage, coder = identity.agent_of_instructions("You triage."), identity.agent_of_instructions("You code.")
    assert triage.startswith("agent-") and triage != coder and triage == identity.agent_of_instructions("You triage.")
    assert identity.agent_of_instructions("") == ""


def test_no_convention_is_no_identity():
    assert resolve(Conventions(headers={"x-request-id": ["r1"]}), NOW_S) is None


@pytest.mark.parametrize("context, param", [
    ({"program_id": "t:a", "parent_program_id": "t:x", "parent_id": "t:y"},
     "vllm_xargs.agentic_context.parent_program_id"),
    ({"task_id": "t", "deadline_seconds": 3, "deadline": 4}, "vllm_xargs.agentic_context.deadline_seconds"),
])
def test_one_field_twice_with_different_values_is_refused_naming_both(context, param):
    error = refused(Conventions(agentic_context=context))
    assert error.param == param and str(error).count("vllm_xargs.agentic_context.") == 2


def test_one_header_twice_with_different_values_is_refused():
    error = refused(Conventions(headers={"x-session-id": ["a", "b"]}))
    assert error.param == "x-session-id" and "'a'" in str(error) and "'b'" in str(error)
    assert resolve(Conventions(headers={"x-session-id": ["a", "a"]}), NOW_S).program_id == "a"


@pytest.mark.parametrize("conventions, param", [
    (Conventions(agentic_context="{not json"), "vllm_xargs.agentic_context"),
    (Conventions(agentic_context="x" * (identity.MAX_AGENTIC_CONTEXT_BYTES + 1)), "vllm_xargs.agentic_context"),
    (Conventions(agentic_context=[1]), "vllm_xargs.agentic_context"),
    (Conventions(agentic_context={"step_id": 1}), "vllm_xargs.agentic_context.program_id"),
    (Conventions(agentic_context={"task_id": ["t"]}), "vllm_xargs.agentic_context.task_id"),
    (Conventions(agentic_context={"task_id": "t", "step_id": -1}), "vllm_xargs.agentic_context.step_id"),
    (Conventions(agentic_context={"task_id": "t", "expected_resume": "yes"}),
     "vllm_xargs.agentic_context.expected_resume"),
    (Conventions(agentic_context={"task_id": "t", "priority": 1.5}), "vllm_xargs.agentic_context.priority"),
    (Conventions(agentic_context={"task_id": "t", "deadline_seconds": float("nan")}),
     "vllm_xargs.agentic_context.deadline_seconds"),
    (Conventions(agent_hint={"parent_session_id": "p"}), "agent_hint.session_id"),
    (Conventions(agent_hint="s1"), "agent_hint"),
    (Conventions(headers={"x-session-id": ["s" * (identity.MAX_IDENTITY_CHARS + 1)]}), "x-session-id"),
    (Conventions(headers={"session-id": ["s1"], "thread-id": ["a\tb"]}), "thread-id"),
    (Conventions(agentic_context={"task_id": " "}), "vllm_xargs.agentic_context.task_id"),
])
def test_malformed_or_oversized_values_are_refused_naming_the_field(conventions, param):
    assert refused(conventions).param == param
