"""An official ``openai`` client for the module's ``stack`` fixture (a stack with its gateway)."""

import openai
import pytest


@pytest.fixture
async def client(stack):
    async with openai.AsyncOpenAI(base_url=stack.base_url, api_key="unused", max_retries=0) as c:
        yield c
