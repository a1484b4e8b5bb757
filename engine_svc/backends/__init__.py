"""Engine backends behind one interface, each an ``engine-backend`` plugin (``hetflow.core.plugins``)
built from the engine's config and its queue: ``sim`` (the engine model in real time), ``vllm`` (vLLM's
AsyncLLM in process) and ``vllm-server`` (a running ``vllm serve``, over its HTTP API)."""

from hetflow.core import plugins

plugins.declare("engine-backend", "sim", "engine_svc.backends.sim:sim_backend")
plugins.declare("engine-backend", "vllm", "engine_svc.backends.vllm_backend:vllm_backend")
plugins.declare("engine-backend", "vllm-server", "engine_svc.backends.vllm_server:vllm_server_backend")
