"""The committed stubs must be what protoc makes of the committed protos."""

from pathlib import Path

from hetflow.protogen import REPO_ROOT, generate


def test_committed_stubs_are_fresh(tmp_path: Path):
    fresh = generate(tmp_path)
    assert fresh, "protoc generated nothing"
    stale = []
    for path in fresh:
        committed = REPO_ROOT / path.relative_to(tmp_path)
        if not committed.exists() or committed.read_bytes() != path.read_bytes():
            stale.append(str(committed.relative_to(REPO_ROOT)))
    assert not stale, f"stale stubs (run `make protos`): {stale}"
