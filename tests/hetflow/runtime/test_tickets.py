"""Dispatch tickets (issue 34): what an engine accepts and the status of everything it refuses."""

from __future__ import annotations

import pytest

from hetflow.core.errors import AlreadyExists, FailedPrecondition
from hetflow.runtime.security import DEVELOPMENT_TICKET_KEY, PermissionDenied, SecurityConfig, TlsConfig
from hetflow.runtime.tickets import TicketChecker, TicketIssuer
from hetflow.v1 import common_pb2, engine_pb2

KEY = b"k" * 32
NOW = 1_000.0


def _request(prompt: str = "Write a sort.") -> engine_pb2.EngineGenerateRequest:
    return engine_pb2.EngineGenerateRequest(request_id="team-a/r1", prompt=prompt, priority=42.0,
                                            sampling=common_pb2.SamplingParams(max_tokens=8))


def _signed(request: engine_pb2.EngineGenerateRequest, engine_id: str = "e0", tenant: str = "team-a",
            key: bytes = KEY, ttl_s: float = 5.0) -> engine_pb2.EngineGenerateRequest:
    request.ticket.CopyFrom(TicketIssuer(key, ttl_s).issue(request, tenant, engine_id, True, NOW))
    return request


def test_a_ticket_lets_its_request_run_once_on_its_engine_for_its_tenant():
    checker = TicketChecker(KEY, "e0")
    request = _signed(_request())
    claims = checker.check(request, "team-a", None, NOW + 1)
    assert (claims.request_id, claims.tenant, claims.engine_id, claims.engine_releases) == \
        ("team-a/r1", "team-a", "e0", True)
    with pytest.raises(AlreadyExists):
        checker.check(request, "team-a", None, NOW + 2)


def test_services_present_tickets_for_any_tenant_and_only_some_services_may():
    checker = TicketChecker(KEY, "e0")
    checker.check(_signed(_request()), None, "gateway", NOW)
    with pytest.raises(PermissionDenied, match="may not present"):
        checker.check(_signed(_request()), None, "monitor", NOW)


@pytest.mark.parametrize("tamper, match", [
    (lambda r: r.ClearField("ticket"), "no dispatch ticket"),
    (lambda r: setattr(r.ticket, "mac", bytes(32)), "not issued"),
    (lambda r: setattr(r, "prompt", "Something else."), "request changed"),
    (lambda r: setattr(r, "priority", 0.0), "request changed"),
    (lambda r: setattr(r, "request_id", "team-a/r2"), "another request"),
])
def test_a_missing_forged_or_altered_ticket_is_permission_denied(tamper, match):
    request = _signed(_request())
    tamper(request)
    with pytest.raises(PermissionDenied, match=match):
        TicketChecker(KEY, "e0").check(request, "team-a", None, NOW)


def test_a_ticket_for_another_engine_tenant_or_stack_is_permission_denied():
    with pytest.raises(PermissionDenied, match="engine"):
        TicketChecker(KEY, "e1").check(_signed(_request()), "team-a", None, NOW)
    with pytest.raises(PermissionDenied, match="tenant"):
        TicketChecker(KEY, "e0").check(_signed(_request()), "team-b", None, NOW)
    with pytest.raises(PermissionDenied, match="not issued"):
        TicketChecker(KEY, "e0").check(_signed(_request(), key=b"another stack"), "team-a", None, NOW)


def test_an_expired_ticket_is_failed_precondition_even_if_never_used():
    with pytest.raises(FailedPrecondition, match="expired"):
        TicketChecker(KEY, "e0").check(_signed(_request(), ttl_s=5.0), "team-a", None, NOW + 5.5)


def test_the_engine_forgets_the_nonces_of_expired_tickets():
    checker = TicketChecker(KEY, "e0")
    for i in range(10):
        checker.check(_signed(_request(f"prompt {i}")), "team-a", None, NOW)
    assert len(checker._seen) == 10
    checker.check(_signed(_request("later"), ttl_s=100.0), "team-a", None, NOW + 6)
    assert len(checker._seen) == 1


def test_the_ticket_key_comes_from_its_file_or_the_service_token_and_is_required_when_callers_are_checked(tmp_path):
    (tmp_path / "ticket.key").write_text("secret\n")
    (tmp_path / "token").write_text("tok")
    assert SecurityConfig(ticket_key_file=str(tmp_path / "ticket.key")).ticket_key() == b"secret"
    from_token = SecurityConfig(service_token_file=str(tmp_path / "token")).ticket_key()
    assert from_token not in (b"tok", DEVELOPMENT_TICKET_KEY) and len(from_token) == 32
    assert SecurityConfig().ticket_key() == DEVELOPMENT_TICKET_KEY
    with pytest.raises(ValueError, match="ticket_key_file"):
        SecurityConfig(tls=TlsConfig(ca_file="ca", cert_file="c", key_file="k")).ticket_key()
