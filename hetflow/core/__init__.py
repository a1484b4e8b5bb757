"""hetflow's core: the only code the services and the simulator share.

It imports no gRPC, no service and no simulator (``tests/test_layering.py``), and reads no clock:
time is passed in. What lives here:

- domain types: ``call`` (the LLM call, its workflow info and sampling), ``snapshot`` (engine views,
  the cluster snapshot), ``features`` (Chimera 3.4's feature row), ``trace`` (workflow traces);
- the balancer's decision: ``policies`` (one per file), ``pipeline``, ``cost`` (HexGen-Flow's
  equations), ``alpha`` (HexGen-Flow 4.3), ``hold_queue`` (Kairos 6), ``policy_config``, ``presets``;
- ``plugins``: the one registry of every pluggable kind;
- ``engine``: the engine model (continuous batching, KV blocks, preemption, timing profile) and its
  queues, which the ``sim`` backend runs in real time and the simulator in virtual time;
- ``monitor``: the monitor's state as plain dataclasses and ``cluster_snapshot``, the one function
  that builds a balancer's view of the cluster;
- ``stats`` and ``errors`` (the runtime maps them to gRPC status codes).
"""
