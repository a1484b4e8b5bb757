"""Domain exceptions of hetflow's core, one per way a call can fail.

The core raises these without knowing about gRPC; ``hetflow.runtime.interceptors`` maps each to its
status code (``STATUS_OF``), so no servicer builds a status by hand.
"""

from __future__ import annotations


class HetflowError(Exception):
    """Base of every domain error; unmapped, it answers INTERNAL."""


class InvalidArgument(HetflowError):
    """The caller's input is wrong (INVALID_ARGUMENT)."""


class NotFound(HetflowError):
    """A named model, engine, program or request does not exist (NOT_FOUND)."""


class ResourceExhausted(HetflowError):
    """The call can never fit, or a bounded queue is full (RESOURCE_EXHAUSTED). ``retry_after_s``: when
    trying again may succeed (a full queue, a rate limit); None when it never will."""

    def __init__(self, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Unavailable(HetflowError):
    """Nothing healthy can serve the call now (UNAVAILABLE)."""


class DeadlineExceeded(HetflowError):
    """The call's or its program's deadline has passed (DEADLINE_EXCEEDED)."""


class FailedPrecondition(HetflowError):
    """The call is well formed but the system is not in the state it needs, e.g. its dispatch ticket
    expired (FAILED_PRECONDITION): decide again rather than retry as is."""


class Aborted(HetflowError):
    """A concurrency conflict (ABORTED): what the caller decided on changed before its request landed,
    e.g. another balancer's admits took the KV room a conditional admit needed: decide again."""


class AlreadyExists(HetflowError):
    """What the call would create exists already, e.g. a dispatch ticket presented twice (ALREADY_EXISTS)."""


class Unimplemented(HetflowError):
    """This server does not offer the method for what it serves, e.g. ``Engine.Hold`` on an engine with no
    model server to stream from (UNIMPLEMENTED): call the general method instead."""
