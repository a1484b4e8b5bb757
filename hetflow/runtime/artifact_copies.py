"""The artifact a model service's workers load: a private copy of the configured directory, taken as the
service starts and at each reload, before the model is validated.

Workers started later (the fresh pool made after a worker died) load the copy that was validated, not
whatever lies at the configured path by then: an artifact being written, or one the reloader refused.
The copy is a copy, not a hard link: a writer that rewrites a file in place would change a link too.

The copies live under ``$HETFLOW_CACHE/serving``, not the system's temporary directory (which ages out
files a long-running service has not read since it loaded them), one directory per service process,
with an ``owner`` file naming its host and process: a service removes its own at close, and at start
the directories of this host's processes that are gone (a SIGKILL, a failed start).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
from pathlib import Path

from hetflow.runtime.artifacts import ARTIFACTS

SERVING = ARTIFACTS.parent / "serving"
"""Where the copies go (``$HETFLOW_CACHE/serving``)."""
OWNER = "owner"


class ArtifactCopies:
    """Copies under one private directory, removed by ``close``; one of them is served."""

    def __init__(self, service: str, root: Path | None = None) -> None:
        """``root``: where the copies go (None: ``SERVING``)."""
        root = root or SERVING
        root.mkdir(parents=True, exist_ok=True)
        remove_abandoned(root)
        self._root = Path(tempfile.mkdtemp(prefix=f"{service}-", dir=root))
        (self._root / OWNER).write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid()}))
        self._taken = 0
        self.served: Path | None = None

    @property
    def root(self) -> Path:
        return self._root

    def take(self, artifact: Path) -> Path:
        """A new copy of the directory ``artifact`` (it blocks: run it off the event loop); its files
        dated now, not the artifact's times."""
        self._taken += 1
        copy = self._root / str(self._taken)
        try:
            shutil.copytree(artifact, copy, copy_function=shutil.copyfile)
        except BaseException:
            self.discard(copy)
            raise
        return copy

    def serve(self, copy: Path) -> None:
        """``copy`` is the one served from now on; the one served before it is removed (its workers have
        their model loaded, and a fresh pool loads ``copy``)."""
        before, self.served = self.served, copy
        if before is not None:
            self.discard(before)

    def discard(self, copy: Path) -> None:
        shutil.rmtree(copy, ignore_errors=True)

    def close(self) -> None:
        shutil.rmtree(self._root, ignore_errors=True)


def remove_abandoned(root: Path) -> list[Path]:
    """Remove the copies of this host's service processes that are gone; those of other hosts (a cache
    shared between containers) and of live processes stay. Returns what was removed."""
    host, removed = socket.gethostname(), []
    for directory in root.iterdir():
        try:
            owner = json.loads((directory / OWNER).read_text())
        except (OSError, ValueError):
            continue  # being made, or not ours
        if owner.get("host") == host and isinstance(owner.get("pid"), int) and not _alive(owner["pid"]):
            shutil.rmtree(directory, ignore_errors=True)
            removed.append(directory)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True
