"""The artifact a model service's workers load: a private copy of the configured directory, taken as the
service starts and at each reload, before the model is validated.

Workers started later (the fresh pool made after a worker died) load the copy that was validated, not
whatever lies at the configured path by then: an artifact being written, or one the reloader refused.
The copy is a copy, not a hard link: a writer that rewrites a file in place would change a link too.

The copies live under ``$HETFLOW_CACHE/serving``, not the system's temporary directory (which ages out
files a long-running service has not read since it loaded them), one directory per service process,
whose ``owner`` file the process holds locked while it lives (the kernel lets go at its exit, however
it exits; pids would not do: containers sharing the cache each number their own). A service removes its
own directory at close, and as it starts those nobody holds (a SIGKILL, a failed start).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import IO

from hetflow.runtime.artifacts import ARTIFACTS, ArtifactError
from hetflow.runtime.logs import get_logger

log = get_logger(__name__)

SERVING = ARTIFACTS.parent / "serving"
"""Where the copies go (``$HETFLOW_CACHE/serving``)."""
OWNER = "owner"
ABANDONED_AFTER_S = 3600.0
"""A directory without an owner file this old was left by a process that stopped as it made it."""
BEING_MADE_S = 60.0
"""A directory younger than this is left alone: its process may be about to lock its owner file."""


class ArtifactCopies:
    """Copies under one private directory, removed by ``close``; one of them is served."""

    def __init__(self, service: str, root: Path | None = None) -> None:
        """``root``: where the copies go (None: ``SERVING``). ArtifactError when it cannot hold them."""
        root = root or SERVING
        try:
            root.mkdir(parents=True, exist_ok=True)
            self._root = Path(tempfile.mkdtemp(prefix=f"{service}-", dir=root))
            self._owner: IO[str] = open(self._root / OWNER, "w")
        except OSError as exc:
            raise ArtifactError(f"{root}: cannot hold the copies of the served artifact ({exc}); set "
                                "HETFLOW_CACHE to a writable directory") from exc
        fcntl.flock(self._owner, fcntl.LOCK_EX)
        self._owner.write(json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "service": service}))
        self._owner.flush()
        remove_abandoned(root)
        self._taken, self._closed = 0, False
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
            shutil.copytree(artifact, copy, copy_function=self._copy_file)
        except BaseException:
            self.discard(copy)
            raise
        return copy

    def _copy_file(self, source: str, target: str) -> None:
        if self._closed:  # a copy still running in its thread after close: it stops here
            raise OSError(f"{self._root}: closed")
        shutil.copyfile(source, target)

    def serve(self, copy: Path) -> None:
        """``copy`` is the one served from now on; the one served before it is removed (its workers have
        their model loaded, and a fresh pool loads ``copy``)."""
        before, self.served = self.served, copy
        if before is not None:
            self.discard(before)

    def discard(self, copy: Path) -> None:
        shutil.rmtree(copy, ignore_errors=True)

    def close(self) -> None:
        self._closed = True
        shutil.rmtree(self._root, ignore_errors=True)
        self._owner.close()


def remove_abandoned(root: Path) -> list[Path]:
    """Remove the directories under ``root`` whose owner file no process holds, and those without one
    left for ``ABANDONED_AFTER_S``; best effort (a failure is logged). Returns what was removed."""
    removed = []
    now_unix_s = time.time()
    for directory in root.iterdir():
        if not directory.is_dir():
            continue
        try:
            age_s = now_unix_s - directory.stat().st_mtime
            if age_s >= BEING_MADE_S and _abandoned(directory, age_s):
                shutil.rmtree(directory)
                removed.append(directory)
        except OSError as exc:
            log.warning("artifact_copy_not_removed", path=str(directory), error=str(exc))
    return removed


def _abandoned(directory: Path, age_s: float) -> bool:
    try:
        owner = open(directory / OWNER)
    except FileNotFoundError:
        return age_s >= ABANDONED_AFTER_S
    with owner:
        try:
            fcntl.flock(owner, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # its process holds it
        return True
