"""The one way hetflow's services open a gRPC channel to each other.

- Keepalive: a ping every 2 s, calls or none; a peer that does not answer within 2 s (stopped, gone,
  partitioned) is dropped and its calls fail UNAVAILABLE in seconds, not at TCP's pace. Servers permit
  these pings (``hetflow.runtime.server``).
- Reconnect backoff capped at 1 s (gRPC's default grows to 120 s): a restarted peer is used again
  within a second of coming back.
"""

from __future__ import annotations

import grpc

CHANNEL_OPTIONS = (
    ("grpc.keepalive_time_ms", 2000),
    ("grpc.keepalive_timeout_ms", 2000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
)
SERVER_OPTIONS = (
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 1000),
    ("grpc.http2.max_ping_strikes", 0),
)
"""What a server needs to accept the channels' pings without closing the connection as abusive."""


def open_channel(address: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
