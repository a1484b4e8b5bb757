"""Engine filters of the ``scored`` engine picker, one per file, each registered by import."""

from hetflow.core.policies.filters import memory_fit, working_set  # noqa: F401
