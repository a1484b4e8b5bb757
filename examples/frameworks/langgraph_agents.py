"""A two-agent LangGraph graph through hetflow's gateway: a planner, then a reviewer that calls a tool
(``run_tests``) and answers once it has the result. Chat Completions with tools, as ``langchain-openai``
sends them.

LangGraph names no program, so the run sets one session header through the model's own settings
(``ChatOpenAI(default_headers=...)``); hetflow names each agent by its system prompt (docs/agents.md).

    python examples/frameworks/langgraph_agents.py --base-url http://127.0.0.1:8000/v1
"""

from __future__ import annotations

import argparse
import asyncio
import uuid

import httpx
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode, tools_condition

PLANNER = "You are the planner. Say how the task will be done."
REVIEWER = "You are the reviewer. Run the tests, then approve or reject."


@tool
def run_tests(target: str) -> str:
    """Run the test suite of ``target`` and report the result."""
    return f"3 tests of {target} passed"


def graph(model: ChatOpenAI) -> CompiledStateGraph:
    """planner -> reviewer <-> tools -> end."""
    reviewer_model = model.bind_tools([run_tests])

    async def planner(state: MessagesState) -> dict:
        return {"messages": [await model.ainvoke([SystemMessage(PLANNER), *state["messages"]])]}

    async def reviewer(state: MessagesState) -> dict:
        return {"messages": [await reviewer_model.ainvoke([SystemMessage(REVIEWER), *state["messages"]])]}

    builder = StateGraph(MessagesState)
    builder.add_node("planner", planner)
    builder.add_node("reviewer", reviewer)
    builder.add_node("tools", ToolNode([run_tests]))
    builder.add_edge(START, "planner")
    builder.add_edge("planner", "reviewer")
    builder.add_conditional_edges("reviewer", tools_condition, {"tools": "tools", END: END})
    builder.add_edge("tools", "reviewer")
    return builder.compile()


async def run(base_url: str, request: str, http_client: httpx.AsyncClient | None = None) -> tuple[str, list[str]]:
    """One run: its session id and the messages' kinds and texts, in order."""
    session_id = f"langgraph-{uuid.uuid4().hex[:12]}"
    model = ChatOpenAI(model="hetflow", base_url=base_url, api_key="unused", max_retries=0,
                       default_headers={"x-session-id": session_id, "x-hetflow-receipt": "1"},
                       http_async_client=http_client)
    state = await graph(model).ainvoke({"messages": [HumanMessage(request)]})
    return session_id, [f"{m.type}: {m.content or m.tool_calls}" for m in state["messages"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--request", default="Write add(a, b) in Python.")
    args = parser.parse_args()
    session_id, messages = asyncio.run(run(args.base_url, args.request))
    print(f"session {session_id}:", *messages, sep="\n")


if __name__ == "__main__":
    main()
