"""Generate the Python stubs of protos/hetflow/v1 into hetflow/v1 (``make protos``).

The stubs are committed; tests/hetflow/test_protogen.py regenerates them into a temporary
folder and fails when the committed ones are stale.
"""

from __future__ import annotations

from pathlib import Path

from grpc_tools import protoc

REPO_ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO_ROOT / "protos"


def proto_files() -> list[Path]:
    return sorted((PROTO_ROOT / "hetflow" / "v1").glob("*.proto"))


def generate(out_dir: Path) -> list[Path]:
    """Write ``*_pb2.py``, ``*_pb2.pyi`` and ``*_pb2_grpc.py`` under ``out_dir/hetflow/v1``."""
    import grpc_tools

    well_known = Path(grpc_tools.__file__).parent / "_proto"
    out_dir.mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *[str(p.relative_to(PROTO_ROOT)) for p in proto_files()],
    ]
    if protoc.main(args) != 0:
        raise RuntimeError("protoc failed: " + " ".join(args))
    return sorted((out_dir / "hetflow" / "v1").glob("*_pb2*.py*"))


def main() -> None:
    written = generate(REPO_ROOT)
    print("\n".join(str(p.relative_to(REPO_ROOT)) for p in written))


if __name__ == "__main__":
    main()
