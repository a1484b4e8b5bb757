"""The gateway's own bound on the calls it carries: a call past it is answered 429 with Retry-After before
its body is read; a balancer's refusal reaches the caller as 429 with the balancer's hint."""

import grpc
import pytest
from starlette.testclient import TestClient

from gateway_svc.app import build
from gateway_svc.config import GatewayConfig
from hetflow.runtime.openai_request import from_grpc

NOT_JSON = b"{not json"


def test_a_call_past_max_in_flight_is_refused_with_retry_after_before_its_body_is_read():
    app = build(GatewayConfig(balancer_address="127.0.0.1:1", max_in_flight=1, overload_retry_after_s=2.5))
    with TestClient(app) as http:
        gateway = app.state.gateway
        gateway.enter()                                      # one call under way fills the bound
        refused = http.post("/v1/chat/completions", content=NOT_JSON, headers={"content-type": "application/json"})
        assert refused.status_code == 429 and refused.headers["retry-after"] == "3"
        assert refused.json()["error"]["type"] == "rate_limit_error" and refused.json()["error"]["code"] == "overloaded"
        gateway.leave()
        read = http.post("/v1/chat/completions", content=NOT_JSON, headers={"content-type": "application/json"})
        assert read.status_code == 400 and "retry-after" not in read.headers   # now its body was read
        assert gateway.in_flight == 0                        # an answered error leaves nothing counted


class _Refusal(grpc.aio.AioRpcError):
    def __init__(self, pushback_ms: str | None) -> None:
        trailing = grpc.aio.Metadata(("grpc-retry-pushback-ms", pushback_ms)) if pushback_ms else grpc.aio.Metadata()
        super().__init__(grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.aio.Metadata(), trailing, "busy")


@pytest.mark.parametrize("pushback_ms, retry_after", [("1000", "1"), ("1500", "2"), (None, None)])
def test_a_balancers_refusal_is_a_429_with_its_hint_as_retry_after(pushback_ms, retry_after):
    error = from_grpc(_Refusal(pushback_ms))
    assert error.status_code == 429 and error.headers().get("retry-after") == retry_after


def test_a_call_that_can_never_fit_is_the_clients_400_that_no_client_retries():
    """The balancer's hint-less refusal (pushback -1: no engine can hold the call) is a 400, as vLLM
    answers a prompt past the context; a 429 would be retried by OpenAI's clients for good."""
    error = from_grpc(_Refusal("-1"))
    assert (error.status_code, error.type, error.code) == (400, "invalid_request_error", "context_length_exceeded")
    assert error.headers() == {}


def test_max_in_flight_is_checked():
    with pytest.raises(ValueError, match="max_in_flight"):
        GatewayConfig(balancer_address="127.0.0.1:1", max_in_flight=-1)
