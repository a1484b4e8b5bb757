"""Serve an ASGI app (the OpenAI gateway) on uvicorn with uvloop, as ``serve_until_signal`` serves gRPC.

uvicorn handles SIGTERM and SIGINT itself: it stops accepting, lets in-flight requests finish for up
to ``grace_s``, then runs the app's lifespan shutdown.
"""

from __future__ import annotations

import math
from typing import Any

from hetflow.runtime.logs import configure, get_logger
from hetflow.runtime.server import ServeConfig

log = get_logger(__name__)


async def serve_asgi_until_signal(service: str, cfg: ServeConfig, app: Any) -> None:
    import uvicorn

    configure(service, cfg.log_level)
    tls = cfg.security.tls
    certfile = str(cfg.security.path(tls.cert_file)) if tls is not None else None
    keyfile = str(cfg.security.path(tls.key_file)) if tls is not None else None
    server = uvicorn.Server(uvicorn.Config(
        app, host=cfg.host, port=cfg.port, loop="none", log_config=None, access_log=False,
        timeout_graceful_shutdown=math.ceil(cfg.grace_s), lifespan="on", log_level=cfg.log_level,  # whole s, not less
        ssl_certfile=certfile, ssl_keyfile=keyfile))
    scheme = "https" if tls is not None else "http"
    log.info("serving", address=f"{scheme}://{cfg.host}:{cfg.port}", services=["openai"])
    await server.serve()
    if not server.started:
        raise RuntimeError(f"{service}: could not serve on {cfg.host}:{cfg.port} (see the log above)")
    log.info("stopped")
