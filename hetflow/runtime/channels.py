"""The one way hetflow's services open a gRPC channel to each other.

- Keepalive: a ping every 2 s, calls or none; a peer that does not answer within 2 s (stopped, gone,
  partitioned) is dropped and its calls fail UNAVAILABLE in seconds, not at TCP's pace. Servers permit
  these pings (``hetflow.runtime.server``).
- Reconnect backoff capped at 1 s (gRPC's default grows to 120 s): a restarted peer is used again
  within a second of coming back.
- Each connection attempt gets 5 s: gRPC reads ``grpc.min_reconnect_backoff_ms`` as the shortest time
  it gives one (``ParseArgsForBackoffValues`` in its subchannel.cc). It was 100 ms, and a handshake
  slowed by a loaded host failed calls UNAVAILABLE before they were sent (issue 31); a peer that does
  not answer at all still fails calls within 5 s.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

import grpc

from hetflow.runtime.security import SecurityConfig, call_metadata, channel_credentials

CHANNEL_OPTIONS = (
    ("grpc.keepalive_time_ms", 2000),
    ("grpc.keepalive_timeout_ms", 2000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 5000),  # the connection attempt's deadline, not the retry delay
    ("grpc.max_reconnect_backoff_ms", 1000),
)
SERVER_OPTIONS = (
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 1000),
    ("grpc.http2.max_ping_strikes", 0),
)
"""What a server needs to accept the channels' pings without closing the connection as abusive."""


class _MetadataUnary(grpc.aio.UnaryUnaryClientInterceptor):
    """Adds the caller's credentials (API key or service token) to every unary call of a channel."""

    def __init__(self, metadata: Sequence[tuple[str, str]]) -> None:
        self.metadata = tuple(metadata)

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(_with(details, self.metadata), request)


class _MetadataStream(grpc.aio.UnaryStreamClientInterceptor):
    """The same for server-streaming calls (grpc.aio files an interceptor under one kind only)."""

    def __init__(self, metadata: Sequence[tuple[str, str]]) -> None:
        self.metadata = tuple(metadata)

    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(_with(details, self.metadata), request)


class _MetadataBidi(grpc.aio.StreamStreamClientInterceptor):
    """The same for bidirectional calls (the batch streams, ``hetflow.runtime.batch_streams``)."""

    def __init__(self, metadata: Sequence[tuple[str, str]]) -> None:
        self.metadata = tuple(metadata)

    async def intercept_stream_stream(self, continuation: Any, details: Any, request_iterator: Any) -> Any:
        return await continuation(_with(details, self.metadata), request_iterator)


def _with(details: Any, metadata: tuple[tuple[str, str], ...]) -> Any:
    return details._replace(metadata=(*(details.metadata or ()), *metadata))


MAX_REFUSAL_ATTEMPTS = 5
"""gRPC's own cap on a call's attempts under a retry policy."""


def refusal_retries(attempts: int) -> tuple[tuple[str, Any], ...]:
    """Channel options under which gRPC itself sends a refused call (RESOURCE_EXHAUSTED) again, up to
    ``attempts`` attempts in all, each after the server's retry hint (its ``grpc-retry-pushback-ms``; a
    refusal that retrying cannot help carries -1, which gRPC does not retry: gRFC A6). A streamed call is
    sent again only while no message of it has come back. 1: none."""
    if not 1 <= attempts <= MAX_REFUSAL_ATTEMPTS:
        raise ValueError(f"refusal attempts must be in 1..{MAX_REFUSAL_ATTEMPTS}, got {attempts}")
    if attempts == 1:
        return ()
    policy = {"maxAttempts": attempts, "initialBackoff": "0.5s", "maxBackoff": "5s", "backoffMultiplier": 2,
              "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}
    config = {"methodConfig": [{"name": [{}], "retryPolicy": policy}]}
    return (("grpc.enable_retries", 1), ("grpc.service_config", json.dumps(config)))


def open_channel(address: str, security: SecurityConfig | None = None, api_key: str = "",
                 refusal_attempts: int = 1) -> grpc.aio.Channel:
    """A channel to ``address`` as ``security`` says: TLS (and this service's certificate under mutual
    TLS) or plaintext, and the API key or service token on every call; ``refusal_attempts``: how many
    times a refused call is sent in all (``refusal_retries``; the services' own channels send once and
    decide what a refusal means themselves)."""
    security = security or SecurityConfig()
    metadata = call_metadata(security, api_key)
    interceptors = [_MetadataUnary(metadata), _MetadataStream(metadata), _MetadataBidi(metadata)] \
        if metadata else None
    credentials = channel_credentials(security)
    options = (*CHANNEL_OPTIONS, *refusal_retries(refusal_attempts))
    if credentials is None:
        return grpc.aio.insecure_channel(address, options=options, interceptors=interceptors)
    return grpc.aio.secure_channel(address, credentials, options=options, interceptors=interceptors)
