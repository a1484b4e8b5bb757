"""Engine scorers of the ``scored`` engine picker, one per file, each registered by import."""

from hetflow.core.policies.scorers import (  # noqa: F401
    in_flight_tokens,
    kv_utilization,
    prefix_affinity,
    program_affinity,
    program_home_with_room,
    queue,
    spread_prefix_affinity,
    workload_balanced,
)
