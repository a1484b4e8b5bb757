"""The engine model: continuous batching over paged KV blocks with preemption, timed by a profile,
behind a queue with Chimera 3.7 aging. The real-time ``sim`` backend and the virtual-time simulator run it."""
