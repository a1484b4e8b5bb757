"""Artifact copies: taken whole and dated now, one served at a time, and those of gone processes removed."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

from hetflow.runtime.artifact_copies import OWNER, ArtifactCopies, remove_abandoned


def owned(root, name, host, pid):
    directory = root / name
    (directory / "1").mkdir(parents=True)
    (directory / OWNER).write_text(json.dumps({"host": host, "pid": pid}))
    return directory


def test_only_this_hosts_copies_of_processes_that_are_gone_are_removed(tmp_path):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    host = socket.gethostname()
    dead = owned(tmp_path, "router-dead", host, int(gone.stdout))
    alive = owned(tmp_path, "router-alive", host, os.getpid())
    elsewhere = owned(tmp_path, "router-elsewhere", host + "-other", int(gone.stdout))
    (tmp_path / "being-made").mkdir()  # no owner yet
    assert remove_abandoned(tmp_path) == [dead]
    assert not dead.exists() and alive.exists() and elsewhere.exists() and (tmp_path / "being-made").exists()


def test_a_copy_is_the_artifact_dated_now_and_serving_one_removes_the_one_before(tmp_path):
    artifact = tmp_path / "artifact"
    artifact.mkdir()
    (artifact / "model.bin").write_bytes(b"weights")
    os.utime(artifact / "model.bin", (1e9, 1e9))  # an artifact written long ago
    copies = ArtifactCopies("test", tmp_path / "serving")
    first = copies.take(artifact)
    copies.serve(first)
    assert (first / "model.bin").read_bytes() == b"weights" and (first / "model.bin").stat().st_mtime > 1e9 + 1
    second = copies.take(artifact)
    copies.serve(second)
    assert not first.exists() and second.exists() and copies.served == second
    assert json.loads((copies.root / OWNER).read_text()) == {"host": socket.gethostname(), "pid": os.getpid()}
    copies.close()
    assert not copies.root.exists() and (tmp_path / "serving").exists()
