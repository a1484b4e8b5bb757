"""Two OpenAI Agents SDK agents with a handoff, on the Responses API, through hetflow's gateway.

The SDK names no program, so the run sets one session header through the agents' own model settings
(``ModelSettings.extra_headers``); hetflow names each agent by its instructions (docs/agents.md).

    python examples/frameworks/agents_sdk.py --base-url http://127.0.0.1:8000/v1
"""

from __future__ import annotations

import argparse
import asyncio
import uuid

import httpx
from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, set_tracing_disabled
from openai import AsyncOpenAI


def agents(client: AsyncOpenAI, session_id: str, model: str = "hetflow") -> Agent:
    """The triage agent, which hands off to the coder; both send the run's session header."""
    settings = ModelSettings(extra_headers={"x-session-id": session_id, "x-hetflow-receipt": "1"})
    coder = Agent(name="Coder", instructions="You are the coder. Write the code asked for.",
                  model=OpenAIResponsesModel(model, client), model_settings=settings)
    return Agent(name="Triage", instructions="You are the triage agent. Hand coding work to the coder.",
                 handoffs=[coder], model=OpenAIResponsesModel(model, client), model_settings=settings)


async def run(base_url: str, request: str, http_client: httpx.AsyncClient | None = None) -> tuple[str, str, str]:
    """One run: its session id, the agent that answered last, and the answer."""
    set_tracing_disabled(True)  # the SDK would export traces to OpenAI
    session_id = f"agents-{uuid.uuid4().hex[:12]}"
    client = AsyncOpenAI(base_url=base_url, api_key="unused", http_client=http_client, max_retries=0)
    result = await Runner.run(agents(client, session_id), request)
    return session_id, result.last_agent.name, str(result.final_output)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--request", default="Write add(a, b) in Python.")
    args = parser.parse_args()
    session_id, agent, answer = asyncio.run(run(args.base_url, args.request))
    print(f"session {session_id}: answered by {agent}\n{answer}")


if __name__ == "__main__":
    main()
