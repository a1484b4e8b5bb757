"""Real agent frameworks end to end through the gateway (issue 36): the OpenAI Agents SDK's two agents
with a handoff, on the Responses API, and a two-agent LangGraph graph with a tool call, on Chat
Completions. The sim engines answer from examples/frameworks/script.yaml, so each framework takes its
real path; every call's receipt is read off the wire. Each run sets one session header through the
framework's own settings; the calls of a run must share a program, its agents must be told apart, and
the receipts must say so."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from tests.integration.harness import LARGE, SMALL, stack_config, wait_until_idle, with_gateway

pytestmark = pytest.mark.slow
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "frameworks"


def example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"frameworks_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
async def stack():
    script = str(EXAMPLES / "script.yaml")
    async with with_gateway(stack_config([{"name": "small-0", "profile": f"{SMALL}@a6000", "sim_script": script},
                                          {"name": "large-0", "profile": f"{LARGE}@a6000", "sim_script": script}])
                            ) as s:
        yield s


class Receipts:
    """An HTTP client for the framework that keeps each reply's receipt."""

    def __init__(self) -> None:
        self.receipts: list[dict] = []
        self.client = httpx.AsyncClient(event_hooks={"response": [self._keep]}, timeout=30.0)

    async def _keep(self, response: httpx.Response) -> None:
        await response.aread()
        assert response.status_code == 200, response.text
        self.receipts.append(json.loads(response.text)["hetflow"]["receipt"])

    def workflows(self) -> list[dict]:
        return [r["workflow"] for r in self.receipts]


async def test_the_agents_sdk_handoff_runs_as_one_program_of_two_agents(stack):
    recorded = Receipts()
    async with recorded.client:
        session_id, last_agent, answer = await example("agents_sdk").run(stack.base_url, "Write add(a, b).",
                                                                          recorded.client)
    assert (last_agent, answer) == ("Coder", "def add(a, b):\n    return a + b")   # the handoff was taken
    workflows = recorded.workflows()
    assert len(workflows) == 2 and {w["program_id"] for w in workflows} == {session_id}
    assert {w["identity_source"] for w in workflows} == {"x-session-id"}
    triage, coder = (w["agent"] for w in workflows)
    assert triage.startswith("agent-") and coder.startswith("agent-") and triage != coder
    assert [r["inferred_stages"]["stage_index"] for r in recorded.receipts] == [1, 2]
    await wait_until_idle(stack)


async def test_the_langgraph_graph_runs_its_tool_call_as_one_program(stack):
    recorded = Receipts()
    async with recorded.client:
        session_id, messages = await example("langgraph_agents").run(stack.base_url, "Write add(a, b).",
                                                                      recorded.client)
    assert messages[-2:] == ["tool: 3 tests of add passed", "ai: All tests pass. Approved."]  # the tool ran
    workflows = recorded.workflows()
    assert len(workflows) == 3 and {w["program_id"] for w in workflows} == {session_id}
    planner, reviewer, reviewer_again = (w["agent"] for w in workflows)
    assert planner != reviewer == reviewer_again                          # the same agent's two calls
    assert [r["inferred_stages"]["stage_index"] for r in recorded.receipts] == [1, 2, 3]
    await wait_until_idle(stack)
