"""The gateway's own checks of a caller, before any call reaches the balancer."""

import asyncio
import hashlib

import pytest
from starlette.requests import Request

from gateway_svc.app import _caller
from gateway_svc.config import GatewayConfig
from hetflow.runtime.openai_request import OpenAIError
from hetflow.runtime.security import SecurityConfig
from hetflow.runtime.server import ServeConfig


def request_with(authorization: str) -> Request:
    headers = [(b"authorization", authorization.encode())] if authorization else []
    return Request({"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": headers})


def config(api_keys: dict[str, str]) -> GatewayConfig:
    return GatewayConfig(serve=ServeConfig(security=SecurityConfig(api_keys=api_keys)))


@pytest.mark.parametrize("authorization", ["Bearer EMPTY", "Bearer sk-anything", ""])
def test_on_a_stack_without_keys_no_key_is_passed_on_whatever_the_client_sends(authorization):
    assert _caller(request_with(authorization), config({})) == ("", "")


def test_on_a_stack_with_keys_the_key_names_its_tenant_and_others_are_refused():
    keys = {hashlib.sha256(b"sk-a").hexdigest(): "team-a"}
    assert _caller(request_with("Bearer sk-a"), config(keys)) == ("sk-a", "team-a")
    for authorization in ("Bearer sk-other", ""):
        with pytest.raises(OpenAIError) as refused:
            _caller(request_with(authorization), config(keys))
        assert refused.value.status_code == 401


def test_a_body_json_cannot_read_an_unknown_route_and_a_wrong_method_are_openai_shaped():
    """Each answered before any call reaches the balancer (none runs here): an integer past Python's 4,300
    digits (a plain ValueError of ``json.loads``) is the client's 400, and Starlette's own 404 and 405
    carry OpenAI's error object."""
    from starlette.testclient import TestClient

    from gateway_svc.app import build

    with TestClient(build(GatewayConfig(balancer_address="127.0.0.1:1"))) as http:
        huge = http.post("/v1/chat/completions", headers={"content-type": "application/json"},
                         content=b'{"model": "hetflow", "max_tokens": ' + b"1" * 5000 + b"}")
        unknown = http.post("/v1/embeddings", json={"model": "hetflow", "input": "hi"})
        wrong_method = http.get("/v1/chat/completions")
        logprobs = http.post("/v1/chat/completions", json={"model": "hetflow", "logprobs": True,
                                                            "messages": [{"role": "user", "content": "hi"}]})
    assert huge.status_code == 400 and "not valid JSON" in huge.json()["error"]["message"]
    assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "not_found_error"
    assert wrong_method.status_code == 405 and wrong_method.json()["error"]["type"] == "invalid_request_error"
    assert wrong_method.headers["allow"] == "POST"
    assert logprobs.status_code == 400 and logprobs.json()["error"]["param"] == "logprobs"


def test_nan_a_lone_surrogate_and_a_forced_tool_call_are_400s_and_every_error_is_json():
    """JSON has no NaN (Python's reader takes it, and a stored response echoing it would fail every later
    read); an unknown field named by a lone surrogate is echoed in the error, which must still encode."""
    import json

    from starlette.testclient import TestClient

    from gateway_svc.app import build

    chat = b'{"model": "hetflow", "messages": [{"role": "user", "content": "hi"}]'
    with TestClient(build(GatewayConfig(balancer_address="127.0.0.1:1"))) as http:
        nan = http.post("/v1/chat/completions", headers={"content-type": "application/json"},
                        content=chat + b', "temperature": NaN}')
        huge = http.post("/v1/responses", headers={"content-type": "application/json"},
                         content=b'{"model": "hetflow", "input": "hi", "truncation": 1e400}')
        surrogate = http.post("/v1/chat/completions", headers={"content-type": "application/json"},
                              content=chat + b', "hetflow": {"\\ud800": 1}}')
        forced = http.post("/v1/responses", json={"model": "hetflow", "input": "hi", "tool_choice": "required",
                                                  "tools": [{"type": "function", "name": "f"}]})
    assert nan.status_code == 400 and "NaN" in nan.json()["error"]["message"]
    assert huge.status_code == 400 and "1e400" in huge.json()["error"]["message"]
    assert surrogate.status_code == 400 and json.loads(surrogate.content)["error"]["param"] == "hetflow.\ud800"
    assert forced.status_code == 400 and forced.json()["error"]["param"] == "tool_choice"


async def _body_of(messages: list[dict], timeout_s: float):
    from gateway_svc.app import _body

    async def receive():
        if messages:
            return messages.pop(0)
        await asyncio.Event().wait()   # a client that sends nothing more

    request = Request({"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}, receive)
    return await _body(request, 1 << 20, timeout_s)


async def test_a_body_that_stalls_is_a_408_and_a_client_that_leaves_mid_body_is_no_error():
    from gateway_svc.app import ClientLeft

    with pytest.raises(OpenAIError) as stalled:
        await _body_of([{"type": "http.request", "body": b'{"mod', "more_body": True}], 0.05)
    assert (stalled.value.status_code, stalled.value.code) == (408, "request_timeout")
    with pytest.raises(ClientLeft):
        await _body_of([{"type": "http.request", "body": b'{"mod', "more_body": True}, {"type": "http.disconnect"}],
                       30.0)
    assert await _body_of([{"type": "http.request", "body": b'{"model": "m"}', "more_body": False}], 30.0) == {
        "model": "m"}
