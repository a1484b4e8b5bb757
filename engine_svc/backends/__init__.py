"""Engine backends behind one interface, each an ``engine-backend`` plugin (``hetflow.core.plugins``)
built from the engine's config and its queue: ``sim`` (the engine model in real time) and ``vllm``."""

from hetflow.core import plugins

plugins.declare("engine-backend", "sim", "engine_svc.backends.sim:sim_backend")
plugins.declare("engine-backend", "vllm", "engine_svc.backends.vllm_backend:vllm_backend")
