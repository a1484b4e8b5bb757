"""Artifact copies: taken whole and dated now, one served at a time; the directories of processes that
are gone removed, those of live ones (whatever their pid looks like from here) kept."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from hetflow.runtime.artifact_copies import ABANDONED_AFTER_S, BEING_MADE_S, OWNER, ArtifactCopies, remove_abandoned
from hetflow.runtime.artifacts import ArtifactError

HOLDER = """
import sys, time
from pathlib import Path
from hetflow.runtime.artifact_copies import ArtifactCopies
copies = ArtifactCopies("router", Path(sys.argv[1]))
print(copies.root, flush=True)
time.sleep(300)
"""


def aged(directory, age_s):
    then = time.time() - age_s
    os.utime(directory, (then, then))
    return directory


def test_the_copies_of_a_killed_service_are_removed_and_a_live_ones_kept(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    killed = aged(tmp_path / os.path.basename(holder.stdout.readline().strip()), 2 * BEING_MADE_S)
    live = ArtifactCopies("router", tmp_path)
    aged(live.root, 2 * BEING_MADE_S)
    assert remove_abandoned(tmp_path) == [] and killed.exists()  # its process holds it
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert remove_abandoned(tmp_path) == [killed] and live.root.exists()
    live.close()


def test_directories_being_made_or_without_an_owner_are_kept_until_they_are_old(tmp_path):
    young = tmp_path / "young"
    young.mkdir()
    (young / OWNER).write_text("{}")  # nobody holds it, but its process may be about to
    recent = tmp_path / "recent"  # no owner file: a process stopped as it made it, or is making it
    recent.mkdir()
    aged(recent, 2 * BEING_MADE_S)
    stale = tmp_path / "stale"
    stale.mkdir()
    aged(stale, 2 * ABANDONED_AFTER_S)
    assert remove_abandoned(tmp_path) == [stale] and young.exists() and recent.exists()


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
    assert json.loads((copies.root / OWNER).read_text())["pid"] == os.getpid()
    copies.close()
    assert not copies.root.exists() and (tmp_path / "serving").exists()
    with pytest.raises(OSError, match="closed"):  # a copy still running after close stops at its next file
        copies._copy_file(str(artifact / "model.bin"), str(tmp_path / "late.bin"))


def test_a_cache_that_cannot_hold_copies_is_a_clear_error(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    with pytest.raises(ArtifactError, match="HETFLOW_CACHE"):
        ArtifactCopies("router", blocked / "serving")
