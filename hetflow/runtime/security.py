"""Who may call what: TLS and mutual TLS on every channel, API keys at the front door, service
identities between services (issue 14).

Four kinds of caller:
- a **service** of hetflow's own, known by the common name of its client certificate under mutual TLS
  (``monitor``, ``router``, ``predictor``, ``balancer``, ``gateway``, ``engine``, ``operator`` for the
  CLI), or, without TLS, by the stack's shared service token and the identity it names;
- a **tenant**, known by an API key (``authorization: Bearer <key>``) whose SHA-256 the stack config
  maps to the tenant's name;
- **anonymous**: a caller with neither, which only the balancer serves, and only when the stack has
  no API keys (the front door is open; the balancer's TLS cannot ask for client certificates without
  requiring them of tenants too, so the gateway's calls reach it as its caller's key or anonymously);
- **anyone**: with security off (no ``security`` section) every caller is trusted, as on loopback.

``ACCESS`` says, per method, which callers it serves: control calls (Admit, Release, Report, Abort,
Status, GetProgram, Score, Predict) only hetflow's services; the balancer's calls tenants and the
gateway; health and reflection anyone (probes). Everything here is pure but ``caller_of``, which
reads a call's metadata and TLS peer.
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import grpc

from hetflow.runtime.typed_config import build

IDENTITIES = ("monitor", "router", "predictor", "balancer", "gateway", "engine", "operator")
"""The service identities a certificate's common name (or the service token's identity) may name."""
SERVICE_TOKEN_KEY = "x-hetflow-service-token"
SERVICE_IDENTITY_KEY = "x-hetflow-service"
"""Metadata naming a service without mutual TLS: the shared token and the identity it claims."""
TICKET_KEY_HOLDERS = ("balancer", "engine")
"""The identities that read the ticket key: balancers sign dispatch tickets, engines check them."""
DEVELOPMENT_TICKET_KEY = b"hetflow development dispatch tickets: security is off"
OPEN_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.v1alpha.ServerReflection/")
"""Methods anyone may call (health probes, schema reflection)."""

ACCESS: Mapping[str, frozenset[str]] = {
    "/hetflow.v1.Balancer/Generate": frozenset({"tenant", "anonymous", "gateway", "operator"}),
    "/hetflow.v1.Balancer/Complete": frozenset({"tenant", "anonymous", "gateway", "operator"}),
    "/hetflow.v1.Balancer/Workload": frozenset({"operator"}),  # it reads sampled prompts
    # the engine checks the call's dispatch ticket too (hetflow.runtime.tickets): tenants and the gateway
    # stream the calls a balancer decided for them straight from the engine (issue 34's direct path)
    "/hetflow.v1.Engine/Generate": frozenset({"balancer", "gateway", "tenant", "anonymous", "operator"}),
    "/hetflow.v1.Balancer/Decide": frozenset({"tenant", "anonymous", "gateway", "operator"}),
    "/hetflow.v1.Balancer/DecideStream": frozenset({"tenant", "anonymous", "gateway", "operator"}),
    # a standard gateway (Envoy) asking the balancer's endpoint picker where a call goes; the tenant's API
    # key is checked in the HTTP headers it forwards
    "/envoy.service.ext_proc.v3.ExternalProcessor/Process": frozenset({"gateway"}),
    "/hetflow.v1.Engine/Hold": frozenset({"gateway", "tenant", "anonymous"}),
    "/hetflow.v1.Engine/Abort": frozenset({"balancer"}),
    "/hetflow.v1.Engine/Status": frozenset({"balancer", "monitor", "operator"}),
    # engines end the entries of the calls they stream directly, and tell a restarted monitor those again
    "/hetflow.v1.Monitor/Admit": frozenset({"balancer", "engine"}),
    "/hetflow.v1.Monitor/Complete": frozenset({"balancer", "engine"}),
    "/hetflow.v1.Monitor/Cancel": frozenset({"balancer", "engine"}),
    "/hetflow.v1.Monitor/ReleaseStream": frozenset({"balancer", "engine"}),
    "/hetflow.v1.Monitor/ReportEngineStatus": frozenset({"engine"}),
    "/hetflow.v1.Monitor/ReportStream": frozenset({"engine"}),
    "/hetflow.v1.Monitor/ReportEngineFailure": frozenset({"balancer"}),
    "/hetflow.v1.Monitor/Snapshot": frozenset({"balancer", "gateway", "operator"}),
    "/hetflow.v1.Monitor/GetProgram": frozenset({"balancer", "operator"}),
    "/hetflow.v1.Monitor/Snapshots": frozenset({"balancer", "operator"}),
    "/hetflow.v1.Monitor/AdmitBatch": frozenset({"balancer"}),
    "/hetflow.v1.Monitor/SnapshotsStream": frozenset({"balancer", "operator"}),
    "/hetflow.v1.Monitor/WatchEngines": frozenset({"balancer", "operator"}),
    "/hetflow.v1.Monitor/AdmitStream": frozenset({"balancer"}),
    "/hetflow.v1.Router/Score": frozenset({"balancer"}),
    "/hetflow.v1.Router/ScoreStream": frozenset({"balancer"}),
    "/hetflow.v1.Router/Describe": frozenset({"balancer", "operator"}),
    "/hetflow.v1.Predictor/Predict": frozenset({"balancer"}),
    "/hetflow.v1.Predictor/PredictStream": frozenset({"balancer"}),
}
"""Method -> the callers it serves: service identities, or "tenant" for any holder of an API key."""


class Unauthenticated(Exception):
    """No credentials, or credentials nobody issued: UNAUTHENTICATED."""


class PermissionDenied(Exception):
    """A known caller asking for a call it is not allowed: PERMISSION_DENIED."""


@dataclass(frozen=True)
class TlsConfig:
    """PEM files; ``{identity}`` in a path is the service's identity (``certs/{identity}.crt``)."""

    ca_file: str = ""
    """The CA that signs every service's certificate (and that clients verify servers with)."""
    cert_file: str = ""
    key_file: str = ""
    mutual: bool = True
    """Services present their certificates to each other and control calls need one (mutual TLS)."""


@dataclass(frozen=True)
class SecurityConfig:
    """The stack's ``security`` section, as one service (``identity``) uses it."""

    identity: str = ""
    """This service's identity, set by the service's config (never from YAML)."""
    tls: TlsConfig | None = None
    api_keys: Mapping[str, str] = field(default_factory=dict)
    """An API key's SHA-256 (hex) -> the tenant it names (``hetflow api-key`` makes both)."""
    service_token_file: str = ""
    """Without mutual TLS: a file holding the secret hetflow's services show each other."""
    ticket_key_file: str = ""
    """A file holding the secret balancers sign dispatch tickets with and engines check them with
    (``hetflow.runtime.tickets``). Without it the key is derived from the service token; under mutual
    TLS with no token it is required (``hetflow certs`` writes one)."""

    def __post_init__(self) -> None:
        if isinstance(self.tls, Mapping):
            object.__setattr__(self, "tls", build(TlsConfig, self.tls, "security.tls"))
        if self.identity and self.identity not in IDENTITIES:
            raise ValueError(f"security identity must be one of {IDENTITIES}, got {self.identity!r}")
        for digest, tenant in self.api_keys.items():
            if len(str(digest)) != 64 or not str(tenant):
                raise ValueError("security.api_keys maps an API key's SHA-256 (64 hex digits) to a tenant name")
        if self.tls is not None and not self.tls.ca_file:
            raise ValueError("security.tls needs ca_file (and cert_file and key_file for a service)")

    @property
    def enforced(self) -> bool:
        """Whether callers are checked at all (anything configured beyond server-only TLS)."""
        return bool(self.api_keys or self.service_token_file or (self.tls is not None and self.tls.mutual))

    def path(self, template: str) -> Path:
        return Path(template.format(identity=self.identity)).expanduser()

    def files(self) -> dict[str, Path]:
        """The files this identity reads, by role (``ca``, ``cert``, ``key``, ``token``): what a
        container or pod must be given (``hetflow compose``, ``hetflow kube``)."""
        named = {"token": self.service_token_file}
        if self.identity in TICKET_KEY_HOLDERS:
            named["ticket"] = self.ticket_key_file
        if self.tls is not None:
            named |= {"ca": self.tls.ca_file, "cert": self.tls.cert_file, "key": self.tls.key_file}
        return {role: self.path(template) for role, template in named.items() if template}

    def service_token(self) -> str:
        return self.path(self.service_token_file).read_text(encoding="utf-8").strip() if self.service_token_file else ""

    def ticket_key(self) -> bytes:
        """The dispatch tickets' HMAC key: the ticket key file's, else one derived from the service token;
        with security off a fixed development key (anyone may call anything then, and a ticket still
        binds its request, engine, expiry and single use)."""
        if self.ticket_key_file:
            return self.path(self.ticket_key_file).read_bytes().strip()
        if token := self.service_token():
            return hmac.new(token.encode("utf-8"), b"hetflow dispatch tickets", hashlib.sha256).digest()
        if self.enforced:
            raise ValueError("security: dispatch tickets need ticket_key_file (or service_token_file) "
                             "when callers are checked")
        return DEVELOPMENT_TICKET_KEY


@dataclass(frozen=True)
class Caller:
    """Who made a call: ``kind`` "service" (``name`` its identity), "tenant" (``name`` the tenant) or
    "anyone" (security off)."""

    kind: str
    name: str = ""

    @property
    def role(self) -> str:
        return "tenant" if self.kind == "tenant" else self.name


ANYONE = Caller("anyone")
ANONYMOUS = Caller("anonymous", "anonymous")
CURRENT_CALLER: contextvars.ContextVar[Caller] = contextvars.ContextVar("hetflow_caller", default=ANYONE)
"""The caller of the RPC being handled (set by the server interceptor before the handler runs)."""


def stack_security(raw: Mapping[str, object], identity: str) -> SecurityConfig:
    """A stack config's ``security`` section as ``identity`` uses it (the CLI is ``operator``)."""
    section = raw.get("security") or {}
    if not isinstance(section, Mapping):
        raise ValueError("security must be a mapping")
    return build(SecurityConfig, {**section, "identity": identity}, "security")


def key_digest(api_key: str) -> str:
    return hashlib.sha256(api_key.encode("utf-8")).hexdigest()


def bearer(metadata: Mapping[str, str]) -> str:
    value = metadata.get("authorization", "")
    return value[7:].strip() if value[:7].lower() == "bearer " else ""


def tenant_of_key(api_key: str, api_keys: Mapping[str, str]) -> str:
    """The tenant an API key names; Unauthenticated when nobody issued it."""
    digest = key_digest(api_key)
    for known, tenant in api_keys.items():
        if hmac.compare_digest(known, digest):
            return tenant
    raise Unauthenticated("the API key is not known")


def identify(metadata: Mapping[str, str], peer_common_name: str, cfg: SecurityConfig,
             service_token: str) -> Caller:
    """Who is calling: an API key names a tenant (the gateway forwards its caller's, so the tenant, not
    the gateway, is the caller), then a verified client certificate or the service token names a
    service; with security off, anyone."""
    if not cfg.enforced:
        return ANYONE
    if key := bearer(metadata):
        return Caller("tenant", tenant_of_key(key, cfg.api_keys))
    if peer_common_name in IDENTITIES:
        return Caller("service", peer_common_name)
    shown = metadata.get(SERVICE_TOKEN_KEY, "")
    if shown:
        claimed = metadata.get(SERVICE_IDENTITY_KEY, "")
        if not service_token or not hmac.compare_digest(shown, service_token) or claimed not in IDENTITIES:
            raise Unauthenticated("the service token is not this stack's, or names no service identity")
        return Caller("service", claimed)
    if not cfg.api_keys:
        return ANONYMOUS  # the front door checks no keys: the balancer serves it, no control call does
    raise Unauthenticated("no credentials: an API key (authorization: Bearer ...) or a service certificate")


def authorize(method: str, caller: Caller) -> None:
    """PermissionDenied unless ``caller`` may call ``method`` (``ACCESS``)."""
    if caller is ANYONE or method.startswith(OPEN_PREFIXES):
        return
    allowed = ACCESS.get(method, frozenset())
    if caller.role not in allowed:
        who = f"tenant {caller.name!r}" if caller.kind == "tenant" else f"service {caller.name!r}"
        raise PermissionDenied(f"{who} may not call {method}")


def peer_identity(context: grpc.aio.ServicerContext) -> str | None:
    """The service identity of the caller's verified certificate (its common name), None without one."""
    names = context.auth_context().get("x509_common_name")
    return names[0].decode("utf-8", "replace") if names else None


def caller_of(method: str, context: grpc.aio.ServicerContext, cfg: SecurityConfig, service_token: str) -> Caller:
    """The caller of an RPC, from its metadata and (under mutual TLS) its verified certificate; anyone
    for the methods open to all (health probes need no credentials)."""
    if not cfg.enforced or method.startswith(OPEN_PREFIXES):
        return ANYONE
    metadata = {k: v for k, v in (context.invocation_metadata() or ()) if isinstance(v, str)}
    names = context.auth_context().get("x509_common_name") or [b""]
    return identify(metadata, names[0].decode("utf-8", "replace"), cfg, service_token)


def _read(cfg: SecurityConfig, template: str) -> bytes:
    return cfg.path(template).read_bytes()


def server_credentials(cfg: SecurityConfig) -> grpc.ServerCredentials | None:
    """TLS for a server (None: plaintext). Under mutual TLS the services behind the balancer require a
    client certificate signed by the CA; the balancer does not ask for one (gRPC asks for a client
    certificate only where it requires one), since its callers are tenants known by their keys."""
    if cfg.tls is None:
        return None
    tls = cfg.tls
    if not (tls.cert_file and tls.key_file):
        raise ValueError(f"security.tls: {cfg.identity or 'a service'} needs cert_file and key_file to serve TLS")
    return grpc.ssl_server_credentials(
        [(_read(cfg, tls.key_file), _read(cfg, tls.cert_file))], root_certificates=_read(cfg, tls.ca_file),
        require_client_auth=tls.mutual and cfg.identity != "balancer")


def channel_credentials(cfg: SecurityConfig) -> grpc.ChannelCredentials | None:
    """TLS for a channel (None: plaintext): the CA to verify the server, and under mutual TLS this
    service's own certificate."""
    if cfg.tls is None:
        return None
    tls = cfg.tls
    own = (_read(cfg, tls.key_file), _read(cfg, tls.cert_file)) if tls.mutual and tls.cert_file else (None, None)
    return grpc.ssl_channel_credentials(_read(cfg, tls.ca_file), *own)


def call_metadata(cfg: SecurityConfig, api_key: str = "") -> Sequence[tuple[str, str]]:
    """Metadata every call of this process carries: its API key, or the service token where the stack
    has one. Under mutual TLS too: the balancer asks no client certificate (``server_credentials``), so
    the token is how it knows the operator (``Workload``) and the gateway's Envoy (``Process``); the
    other services know a caller by its certificate first (``identify``)."""
    if api_key:
        return (("authorization", f"Bearer {api_key}"),)
    token = cfg.service_token()
    if token and cfg.identity:
        return ((SERVICE_TOKEN_KEY, token), (SERVICE_IDENTITY_KEY, cfg.identity))
    return ()

