"""The Responses API through the gateway, driven by the official ``openai`` client against a sim stack:
whole and streamed, stored and retrieved, a conversation continued by ``previous_response_id`` as one
program, and 4xx for what it does not serve."""

import httpx
import pytest

from tests.integration.harness import SMALL, stack_config, wait_until_idle, with_gateway

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
async def stack():
    async with with_gateway(stack_config()) as s:
        yield s


async def test_a_whole_response_is_an_assistant_message_with_usage_and_is_stored(stack, client):
    response = await client.responses.create(model=SMALL, input="hello there", instructions="be brief",
                                             max_output_tokens=6, extra_body={"ignore_eos": True})
    assert response.id.startswith("resp_") and response.status == "incomplete"  # cut at max_output_tokens
    assert response.incomplete_details.reason == "max_output_tokens"
    message = response.output[0]
    assert (message.type, message.role, message.content[0].type) == ("message", "assistant", "output_text")
    assert response.output_text and response.usage.output_tokens == 6 and response.usage.input_tokens > 0
    stored = await client.responses.retrieve(response.id)
    assert (stored.id, stored.output_text) == (response.id, response.output_text)
    await wait_until_idle(stack)


async def test_a_streamed_response_sends_the_named_events_in_order(stack, client):
    stream = await client.responses.create(model="hetflow", input=[{"role": "user", "content": "count"}],
                                           max_output_tokens=5, stream=True, extra_body={"ignore_eos": True})
    events = [e async for e in stream]
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.incomplete"]
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas and deltas == events[-4].text == events[-1].response.output_text
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].response.usage.output_tokens == 5
    await wait_until_idle(stack)


async def test_previous_response_id_continues_the_conversation_as_one_program(stack, client):
    first = await client.responses.create(model="hetflow", input="plan it", max_output_tokens=4,
                                          extra_body={"hetflow": {"receipt": True}})
    second = await client.responses.create(model="hetflow", input="now do it", max_output_tokens=4,
                                           previous_response_id=first.id, extra_body={"hetflow": {"receipt": True}})
    receipts = [r.model_extra["hetflow"]["receipt"] for r in (first, second)]
    assert [r["program_id"] for r in receipts] == [first.id, first.id]
    assert [r["workflow"]["identity_source"] for r in receipts] == ["response", "previous_response_id"]
    assert [r["inferred_stages"]["stage_index"] for r in receipts] == [1, 2]
    assert second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens  # the history came too
    await wait_until_idle(stack)


async def test_unknown_or_unsupported_input_is_a_4xx(stack):
    async with httpx.AsyncClient(base_url=stack.base_url) as http:
        missing = await http.post("/responses", json={"model": "hetflow", "input": "x",
                                                         "previous_response_id": "resp_nope"})
        tools = await http.post("/responses", json={"model": "hetflow", "input": "x",
                                                       "tools": [{"type": "web_search"}]})
        image = await http.post("/responses", json={"model": "hetflow", "input": [
            {"role": "user", "content": [{"type": "input_image", "image_url": "http://x"}]}]})
        retrieve = await http.get("/responses/resp_nope")
    assert (missing.status_code, missing.json()["error"]["param"]) == (404, "previous_response_id")
    assert (tools.status_code, tools.json()["error"]["param"]) == (400, "tools[0]")
    assert (image.status_code, image.json()["error"]["param"]) == (400, "input[0].content[0]")
    assert retrieve.status_code == 404
