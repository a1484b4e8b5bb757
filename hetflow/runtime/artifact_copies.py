"""The artifact a model service's workers load: a private copy of the configured directory, taken as the
service starts and at each reload, before the model is validated.

Workers started later (the fresh pool made after a worker died) load the copy that was validated, not
whatever lies at the configured path by then: an artifact being written, or one the reloader refused.
The copy is a copy, not a hard link: a writer that rewrites a file in place would change a link too.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path


class ArtifactCopies:
    """Copies under one private temporary directory, removed by ``close``; one of them is served."""

    def __init__(self, service: str) -> None:
        self._root = Path(tempfile.mkdtemp(prefix=f"hetflow-{service}-artifact-"))
        self._taken = 0
        self.served: Path | None = None

    def take(self, artifact: Path) -> Path:
        """A new copy of the directory ``artifact`` (it blocks: run it off the event loop)."""
        self._taken += 1
        copy = self._root / str(self._taken)
        try:
            shutil.copytree(artifact, copy)
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
