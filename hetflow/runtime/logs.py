"""structlog JSON logs; request and program ids ride in context variables.

The server interceptor binds ``rpc`` per call; servicers bind ``request_id`` and
``program_id`` once they have parsed the request, so every later log line of that call carries
them (grpc.aio runs each call in its own task, so bindings never leak between calls).
"""

from __future__ import annotations

import logging
import sys

import structlog

_level = logging.INFO
"""The level ``configure`` set: structlog's filter and ``debug_enabled`` read the same one."""


def configure(service: str, level: str = "info") -> None:
    global _level
    _level = logging.getLevelName(level.upper())
    logging.basicConfig(format="%(message)s", stream=sys.stderr, level=level.upper())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_level),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(service=service)


def bind_ids(request_id: str = "", program_id: str = "") -> None:
    ids = {k: v for k, v in (("request_id", request_id), ("program_id", program_id)) if v}
    if ids:
        structlog.contextvars.bind_contextvars(**ids)


def debug_enabled() -> bool:
    """Whether debug lines are written: check it before building an expensive debug field."""
    return bool(_level <= logging.DEBUG)


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    return structlog.get_logger(name)
