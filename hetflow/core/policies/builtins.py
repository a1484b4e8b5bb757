"""The built-in policies, registered with ``hetflow.core.plugins`` by importing their modules (each
registers itself with ``@plugin``); one with heavy dependencies is declared by path and imported when built."""

from hetflow.core.plugins import declare
from hetflow.core.policies import (  # noqa: F401
    agent_priority,
    attained_service,
    cache_aware,
    chimera_slack,
    consistent_hash,
    dedicated_small_large,
    engine_first,
    fcfs,
    filters,
    free_at_finish,
    join_shortest_queue,
    kv_overlap_cost,
    least_inflight_tokens,
    least_load,
    max_capacity,
    memory_packer,
    min_min,
    named_pool,
    no_reserve,
    power_of_two,
    predicted_call_tokens,
    predicted_quantile_reserve,
    predicted_total_tokens,
    program_admission,
    program_locality,
    program_remaining_work,
    round_robin,
    scored,
    scorers,
    semantic_router,
    urgency,
    work_left_tokens,
    workflow_ttl,
    workload_balanced,
)

declare("engine-picker", "rl-router", "hetflow.core.policies.rl_router:RlRouter")  # torch: imported when built
