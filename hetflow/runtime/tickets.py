"""Dispatch tickets: a balancer's permission for one request on one engine (issue 34).

On the direct path the balancer decides and admits a call, and the caller (hetflow's client, the
gateway) streams it from the engine itself; the balancer never carries its tokens. The engine must
then know that the request it is asked to run is one a balancer decided, for that engine, for the
tenant asking, with the prompt and settings decided on, and not already run. The ticket says so:

- **claims**: request id, tenant, engine id, expiry, a random nonce, the SHA-256 of the engine request
  without its ticket (so neither prompt nor priority can change after the decision), and whether the
  engine ends the monitor's entry;
- **mac**: HMAC-SHA256 of the serialized claims under the stack's ticket key, which only balancers and
  engines hold (``SecurityConfig.ticket_key``).

The engine answers FAILED_PRECONDITION for an expired ticket (decide again), PERMISSION_DENIED for a
missing, forged or altered one, one for another engine or another tenant, or one shown by a service
not allowed to present tickets, and ALREADY_EXISTS for a ticket shown twice. Tickets are short-lived
(``TICKET_TTL_S``), so an engine remembers the nonces it has run only until their tickets expire.
Time is passed in: issuing and checking are pure but for the nonce.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections import OrderedDict
from dataclasses import dataclass, field

from hetflow.core.errors import AlreadyExists, FailedPrecondition
from hetflow.runtime.security import PermissionDenied
from hetflow.v1 import engine_pb2

TICKET_TTL_S = 5.0
"""How long a ticket stays valid after its decision. Below the monitor's orphan grace (10 s), so an entry
whose ticket was never used is reconciled away only after no engine can accept it any more."""
TICKET_PRESENTERS = frozenset({"balancer", "gateway", "operator"})
"""Service identities that may present a ticket under mutual TLS: the balancer relaying a call, the
gateway streaming one for its tenant, an operator's load test (which signs its own with the stack's
key). Tenants present theirs without a certificate (API key)."""


def request_digest(request: engine_pb2.EngineGenerateRequest) -> bytes:
    """SHA-256 of the engine request without its ticket (deterministic serialization)."""
    bare = engine_pb2.EngineGenerateRequest()
    bare.CopyFrom(request)
    bare.ClearField("ticket")
    return hashlib.sha256(bare.SerializeToString(deterministic=True)).digest()


def _mac(key: bytes, claims: bytes) -> bytes:
    return hmac.new(key, claims, hashlib.sha256).digest()


@dataclass(frozen=True)
class TicketIssuer:
    """The balancer's side: signs a ticket for each dispatch it decides."""

    key: bytes
    ttl_s: float = TICKET_TTL_S

    def issue(self, request: engine_pb2.EngineGenerateRequest, tenant: str, engine_id: str,
              engine_releases: bool, now_unix_s: float) -> engine_pb2.DispatchTicket:
        claims = engine_pb2.TicketClaims(
            request_id=request.request_id, tenant=tenant, engine_id=engine_id,
            expires_unix_s=now_unix_s + self.ttl_s, nonce=os.urandom(16),
            request_sha256=request_digest(request), engine_releases=engine_releases)
        raw = claims.SerializeToString(deterministic=True)
        return engine_pb2.DispatchTicket(claims=raw, mac=_mac(self.key, raw))


@dataclass
class TicketChecker:
    """The engine's side: checks each ticket once (``check``) and remembers the nonces it ran until
    their tickets expire."""

    key: bytes
    engine_id: str
    _seen: OrderedDict[bytes, float] = field(default_factory=OrderedDict)
    """Nonces run here -> their ticket's expiry (unix s), in the order they came."""

    def check(self, request: engine_pb2.EngineGenerateRequest, caller_tenant: str | None,
              presenter: str | None, now_unix_s: float) -> engine_pb2.TicketClaims:
        """The ticket's claims when ``request`` may run here; raises otherwise. ``caller_tenant``: the
        tenant the caller authenticated as (None: a service, or security off). ``presenter``: the
        service identity of the caller's certificate under mutual TLS (None: no certificate)."""
        if presenter is not None and presenter not in TICKET_PRESENTERS:
            raise PermissionDenied(f"service {presenter!r} may not present dispatch tickets")
        if not request.HasField("ticket"):
            raise PermissionDenied("no dispatch ticket: ask a balancer to decide the call (Balancer.Decide)")
        ticket = request.ticket
        if not hmac.compare_digest(_mac(self.key, ticket.claims), ticket.mac):
            raise PermissionDenied("the dispatch ticket was not issued by this stack's balancers")
        claims = engine_pb2.TicketClaims.FromString(ticket.claims)
        if claims.request_id != request.request_id or not hmac.compare_digest(
                claims.request_sha256, request_digest(request)):
            raise PermissionDenied("the dispatch ticket is for another request, or the request changed since")
        if claims.engine_id != self.engine_id:
            raise PermissionDenied(f"the dispatch ticket is for engine {claims.engine_id!r}, not {self.engine_id!r}")
        if caller_tenant is not None and caller_tenant != claims.tenant:
            raise PermissionDenied("the dispatch ticket was issued for another tenant")
        if now_unix_s > claims.expires_unix_s:
            raise FailedPrecondition(f"the dispatch ticket expired {now_unix_s - claims.expires_unix_s:.3f} s ago; "
                                     "decide the call again")
        self._forget_expired(now_unix_s)
        if claims.nonce in self._seen:
            raise AlreadyExists(f"the dispatch ticket of request {claims.request_id!r} was used already")
        self._seen[claims.nonce] = claims.expires_unix_s
        return claims

    def _forget_expired(self, now_unix_s: float) -> None:
        """Drop the oldest nonces whose tickets expired (an expired ticket fails before its nonce is
        looked up); one that came out of expiry order waits for those before it, which costs memory only."""
        while self._seen and next(iter(self._seen.values())) < now_unix_s:
            self._seen.popitem(last=False)
